"""Does one publish stall the hub? ``/healthz`` latency under hostile and huge publishes.

Run ``.venv/bin/python bench/isolation.py`` from the repository root (about 20 s). It starts
``rshub serve`` (embedded Redis in a temp dir) in its own process and measures ``/healthz``
round trips, one after another from this process:

* *idle*: nothing else happening (the baseline);
* *hostile*: while publishers keep sending 0.5 MB notifications whose one ``<rs:md>`` has
  50,000 attributes (quadratic to read in lxml) and 50,000-entry notifications (5.5 MB).
* *bombs*: while four clients keep sending 1 MB gzip and deflate bodies that inflate to
  1 GiB each (:func:`tests.bombs.bomb`) to a publish route, the WebSub endpoint, an admin
  route, a document and an unknown route, half of them ``Connection: close``.

It prints p50/p99/max of each and what the publishes were answered. ``--pool thread`` or
``--pool inline`` (parse everything on the event loop) compares the hub's parse-pool choices;
``--seconds`` sets the length of the loaded phase.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.bombs import bomb  # noqa: E402

NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)


def hostile_body(attributes: int = 50_000) -> bytes:
    attrs = " ".join(f'a{i}="v"' for i in range(attributes))
    return (
        f'<urlset {NS}><rs:md capability="changelist-notification"/><url>'
        "<loc>http://example.org/x</loc><lastmod>2026-01-01T00:00:00Z</lastmod>"
        f'<rs:md change="updated" {attrs}/></url></urlset>'
    ).encode()


def large_body(entries: int = 50_000) -> bytes:
    urls = "".join(
        f"<url><loc>http://example.org/r{i}</loc><lastmod>2026-01-01T00:00:00Z</lastmod>"
        '<rs:md change="updated"/></url>'
        for i in range(entries)
    )
    return (f'<urlset {NS}><rs:md capability="changelist-notification"/>{urls}</urlset>').encode()


def percentiles(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return (
        f"n={len(ms):5d}  p50 {statistics.median(ms):7.1f} ms  p99 {p99:7.1f} ms  "
        f"max {ms[-1]:7.1f} ms"
    )


async def healthz_until(
    session: aiohttp.ClientSession, url: str, done: asyncio.Event
) -> list[float]:
    samples = []
    while not done.is_set():
        started = time.perf_counter()
        async with session.get(url + "/healthz") as resp:
            await resp.read()
        samples.append(time.perf_counter() - started)
        await asyncio.sleep(0.005)
    return samples


async def publish_loop(
    session: aiohttp.ClientSession, url: str, body: bytes, until: float, seen: Counter[str]
) -> None:
    headers = {"Content-Type": "application/xml"}
    n = 0
    while time.monotonic() < until:
        n += 1
        async with session.post(f"{url}/topics/t{n % 4}", data=body, headers=headers) as resp:
            answer = await resp.json()
        seen[f"{resp.status} {answer.get('rule') or ''}".strip()] += 1


async def measure(url: str, seconds: float) -> None:
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        idle_done = asyncio.Event()
        idle = asyncio.create_task(healthz_until(session, url, idle_done))
        await asyncio.sleep(min(5.0, seconds / 2))
        idle_done.set()
        print(f"idle     healthz  {percentiles(await idle)}")

        hostile, large = hostile_body(), large_body()
        seen: Counter[str] = Counter()
        until = time.monotonic() + seconds
        loaded_done = asyncio.Event()
        loaded = asyncio.create_task(healthz_until(session, url, loaded_done))
        await asyncio.gather(
            publish_loop(session, url, hostile, until, seen),
            publish_loop(session, url, hostile, until, seen),
            publish_loop(session, url, large, until, seen),
        )
        loaded_done.set()
        print(f"hostile  healthz  {percentiles(await loaded)}")
        print("publishes answered: " + ", ".join(f"{k} x{v}" for k, v in sorted(seen.items())))

        port = int(url.rsplit(":", 1)[1])
        for coding in ("gzip", "deflate"):
            bomb(1024, coding)  # made before the clock starts
        seen.clear()
        until = time.monotonic() + seconds
        bombed_done = asyncio.Event()
        bombed = asyncio.create_task(healthz_until(session, url, bombed_done))
        await asyncio.gather(*(bomb_loop(port, until, seen, i) for i in range(4)))
        bombed_done.set()
        print(f"bombs    healthz  {percentiles(await bombed)}")
        print("bombs answered: " + ", ".join(f"{k} x{v}" for k, v in sorted(seen.items())))


#: (method, path) the bombs go to: routes that read a body, one that does not, and none.
BOMBED = [
    ("POST", "/topics/t0"),
    ("POST", "/"),
    ("POST", "/admin/subscriptions/resume"),
    ("GET", "/topics/t0/changelist.xml"),
    ("POST", "/no/such/route"),
]


async def bomb_loop(port: int, until: float, seen: Counter[str], n: int) -> None:
    """Bombs, one connection each, until ``until``; the statuses answered into ``seen``."""
    while time.monotonic() < until:
        n += 4  # four loops, each its own turn of routes and kinds
        method, path = BOMBED[n % len(BOMBED)]
        coding = ("gzip", "deflate")[n % 2]
        connection = ("keep-alive", "close")[(n // 2) % 2]
        body = bomb(1024, coding)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/xml\r\nContent-Encoding: {coding}\r\n"
            f"Connection: {connection}\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        writer.write(head.encode() + body)
        try:
            await writer.drain()
            status = (await asyncio.wait_for(reader.readline(), 30)).split()[1].decode()
        except (ConnectionError, IndexError, TimeoutError):
            status = "no answer"
        writer.close()
        seen[f"{method} {path} {status}"] += 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pool", choices=("process", "thread", "inline"), default="process")
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    env = {**os.environ}
    if args.pool == "inline":
        env["RSHUB_PARSE_INLINE_BYTES"] = str(1 << 40)
    else:
        env["RSHUB_PARSE_POOL"] = args.pool
    port = free_port()
    with tempfile.TemporaryDirectory() as data:
        hub = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rshub",
                "serve",
                "--port",
                str(port),
                "--data-dir",
                data,
                "--log-level",
                "WARNING",
            ],
            cwd=ROOT,
            env=env,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline or hub.poll() is not None:
                        raise SystemExit("the hub did not start") from None
                    time.sleep(0.05)
            print(f"parse pool: {args.pool}; loaded phase {args.seconds:.0f} s")
            asyncio.run(measure(url, args.seconds))
        finally:
            hub.terminate()
            hub.wait(15)


if __name__ == "__main__":
    main()
