"""Stream load on one ``rshub serve`` (or several checkouts of it, alternated): live SSE and
WebSocket clients, idle SSE connections.

Run ``.venv/bin/python bench/streamload.py`` from the repository root. It starts ``rshub
serve`` (embedded Redis in a temp dir) once per ``--hub-src`` checkout per round, the rounds
alternating the checkouts so that a busy machine slows each alike, and measures:

* ``live``: ``--sse`` SSE and ``--ws`` WebSocket clients (raw sockets, in a process of their
  own) on one topic; single-change publishes at ``--rate`` per second for ``--seconds``.
  Publish-to-receive p50/p99 per transport (the send time travels in each ``loc``), the
  publish round trip p50/p99, and the hub's CPU milliseconds per 1,000 deliveries (utime +
  stime from ``/proc``, publishes included);
* ``idle``: ``--idle`` SSE (``--idle-kind ws``: WebSocket) connections opened at once:
  seconds until every one has its response headers, and the hub's RSS growth per
  connection (``VmRSS``, KiB).

``--profile DIR`` runs ``py-spy record`` (root) on the hub through the live window and the
idle accept, and prints the top 20 functions by own time.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parent.parent
sys.path.insert(0, str(ROOT))

import pyspy_raw  # noqa: E402  # (this script's folder is first on sys.path)

from tests.support import HubProcess, free_port  # noqa: E402

HOST = "127.0.0.1"
TOPIC = "load"
_T = re.compile(rb'\?t=(\d+)"')
NS_HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/">'
    '<rs:md capability="changelist-notification"/>'
)


def notification(i: int, t_ns: int) -> bytes:
    return (
        NS_HEAD + f"<url><loc>http://bench/x/{i}?t={t_ns}</loc>"
        "<lastmod>2024-01-01T00:00:00Z</lastmod>"
        f'<rs:md change="updated" hash="md5:{i:032x}" length="1000" type="text/html"/>'
        "</url></urlset>"
    ).encode()


# -- the client process -------------------------------------------------------------------


class Receiver(asyncio.Protocol):
    """A raw stream client: counts the ``?t=`` stamps it receives, records their latency."""

    def __init__(self, request: bytes, lat: list[int], ready: asyncio.Future[None]) -> None:
        self.request, self.lat, self.ready = request, lat, ready
        self.carry = b""
        self.headers = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        if not self.headers:
            self.headers = True
            if not self.ready.done():
                self.ready.set_result(None)
        buf = self.carry + data
        end = 0
        for m in _T.finditer(buf):
            self.lat.append(now - int(m.group(1)))
            end = m.end()
        self.carry = buf[max(end, len(buf) - 64) :]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionError("closed before headers"))


def _request(kind: str, port: int) -> bytes:
    if kind == "sse":
        return (
            f"GET /topics/{TOPIC}/events HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
            "Accept: text/event-stream\r\n\r\n"
        ).encode()
    return (
        f"GET /topics/{TOPIC}/ws HTTP/1.1\r\nHost: {HOST}:{port}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n"
    ).encode()


async def clients(port: int, sse: int, ws: int, expect: int, wait: float) -> None:
    """Connect, print ``ready`` and the connect time, then wait for ``expect`` events per
    client (or ``wait`` seconds after the first line on stdin) and print the latencies."""
    loop = asyncio.get_running_loop()
    lat: dict[str, list[int]] = {"sse": [], "ws": []}
    started = time.perf_counter()
    transports = []
    readies = []
    kinds = ["sse"] * sse + ["ws"] * ws
    for k in range(0, len(kinds), 500):
        batch = []
        for kind in kinds[k : k + 500]:
            ready: asyncio.Future[None] = loop.create_future()
            readies.append(ready)
            req = _request(kind, port)
            batch.append(
                loop.create_connection(
                    lambda r=req, kd=kind, rd=ready: Receiver(r, lat[kd], rd), HOST, port
                )
            )
        transports += [t for t, _p in await asyncio.gather(*batch)]
    await asyncio.gather(*readies)
    print(json.dumps({"ready": time.perf_counter() - started}), flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)  # the publisher is done
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and (  # noqa: ASYNC110 (a bounded poll of counts)
        len(lat["sse"]) < expect * sse or len(lat["ws"]) < expect * ws
    ):
        await asyncio.sleep(0.05)
    print(json.dumps({k: v for k, v in lat.items()}), flush=True)
    await loop.run_in_executor(None, sys.stdin.readline)
    for t in transports:
        t.close()


# -- the conductor ------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def profile(pid: int, out: Path, seconds: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            str(Path(sys.executable).parent / "py-spy"),
            "record",
            "-p",
            str(pid),
            "-d",
            str(int(seconds)),
            "-r",
            "200",
            "-f",
            "raw",
            "-o",
            str(out),
            "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def top_own(path: Path, n: int = 20) -> str:
    own, total = pyspy_raw.top_own([path], n)
    rows = [f"{100 * c / total:5.1f}%  {f}" for f, c in own]
    return f"{total} samples\n" + "\n".join(rows)


def spawn_clients(port: int, sse: int, ws: int, expect: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            str(SCRIPT),
            "--role",
            "clients",
            "--port",
            str(port),
            "--sse",
            str(sse),
            "--ws",
            str(ws),
            "--expect",
            str(expect),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


async def live(args: argparse.Namespace, hub: HubProcess, tag: str) -> dict[str, float]:
    import aiohttp

    assert hub.proc is not None
    pid = hub.proc.pid
    count = int(args.rate * args.seconds)
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{hub.url}/topics/{TOPIC}",
            data=notification(0, 0),
            headers={"Content-Type": "application/xml"},
        ) as r:
            assert r.status < 300, await r.text()
        cl = spawn_clients(hub.port, args.sse, args.ws, count)
        assert cl.stdout is not None and cl.stdin is not None
        json.loads(await asyncio.to_thread(cl.stdout.readline))
        await asyncio.sleep(0.5)
        spy = (
            profile(pid, Path(args.profile) / f"{tag}-live.txt", args.seconds)
            if args.profile
            else None
        )
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        rtt: list[float] = []
        interval = 1 / args.rate
        for i in range(count):
            due = t0 + i * interval
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent = time.perf_counter_ns()
            async with session.post(
                f"{hub.url}/topics/{TOPIC}",
                data=notification(i + 1, sent),
                headers={"Content-Type": "application/xml"},
            ) as r:
                await r.read()
                assert r.status < 300
            rtt.append((time.perf_counter_ns() - sent) / 1e6)
        cl.stdin.write("\n")
        cl.stdin.flush()
        lat = json.loads(await asyncio.to_thread(cl.stdout.readline))
        cpu = cpu_seconds(pid) - cpu0
        cl.stdin.write("\n")
        cl.stdin.flush()
        cl.wait(10)
        if spy:
            spy.wait(args.seconds + 20)
    deliveries = len(lat["sse"]) + len(lat["ws"])
    expected = count * (args.sse + args.ws)
    return {
        "sse_p50": pct(lat["sse"], 0.5) / 1e6,
        "sse_p99": pct(lat["sse"], 0.99) / 1e6,
        "ws_p50": pct(lat["ws"], 0.5) / 1e6,
        "ws_p99": pct(lat["ws"], 0.99) / 1e6,
        "rtt_p50": pct(rtt, 0.5),
        "rtt_p99": pct(rtt, 0.99),
        "cpu_ms_per_1k": 1e6 * cpu / max(deliveries, 1),
        "complete": float(deliveries == expected),
    }


async def idle(args: argparse.Namespace, hub: HubProcess, tag: str) -> dict[str, float]:
    assert hub.proc is not None
    pid = hub.proc.pid
    await asyncio.sleep(1.0)
    rss0 = rss_kib(pid)
    spy = profile(pid, Path(args.profile) / f"{tag}-idle.txt", 15) if args.profile else None
    cpu0 = cpu_seconds(pid)
    ws = args.idle_kind == "ws"
    cl = spawn_clients(hub.port, 0 if ws else args.idle, args.idle if ws else 0, 0)
    assert cl.stdout is not None and cl.stdin is not None
    ready = json.loads(await asyncio.to_thread(cl.stdout.readline))["ready"]
    cpu = cpu_seconds(pid) - cpu0
    await asyncio.sleep(2.0)
    rss1 = rss_kib(pid)
    cl.stdin.write("\n\n")
    cl.stdin.flush()
    cl.wait(30)
    if spy:
        spy.wait(30)
    return {
        "accept_s": ready,
        "accept_cpu_s": cpu,
        "rss_kib_per_conn": (rss1 - rss0) / args.idle,
    }


async def conduct(args: argparse.Namespace) -> None:
    results: dict[str, list[dict[str, float]]] = collections.defaultdict(list)
    for rnd in range(args.repeat):
        for src in args.hub_src:
            tag = f"{Path(src).name}-{rnd}"
            with tempfile.TemporaryDirectory(prefix="rshub-streamload-") as data:
                env = {
                    "RSHUB_UVLOOP": "true",
                    "RSHUB_MAX_CONNECTIONS": str(args.idle + 1000),
                    "PYTHONPATH": src,  # resolved in main()
                }
                hub = HubProcess(
                    data, free_port(), "--host", HOST, "--log-level", "WARNING", env=env
                )
                cwd = os.getcwd()
                os.chdir(src)
                try:
                    hub.start(60)
                finally:
                    os.chdir(cwd)
                try:
                    row: dict[str, float] = {}
                    if "live" in args.only:
                        row |= await live(args, hub, tag)
                    if "idle" in args.only:
                        row |= await idle(args, hub, tag)
                finally:
                    hub.stop()
            results[src].append(row)
            print(src, json.dumps({k: round(v, 3) for k, v in row.items()}), flush=True)
    report(args, results)


def report(args: argparse.Namespace, results: dict[str, list[dict[str, float]]]) -> None:
    print("\nmedians over rounds:")
    for src, rows in results.items():
        med = {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}
        print(src, json.dumps(med))
    if args.profile:
        for f in sorted(Path(args.profile).glob("*.txt")):
            if f.stat().st_size:
                print(f"\n== {f.name}: top 20 by own time\n{top_own(f)}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--hub-src", action="append", help="checkout to run the hub from (repeatable)")
    p.add_argument("--only", action="append", choices=("live", "idle"))
    p.add_argument("--sse", type=int, default=100)
    p.add_argument("--ws", type=int, default=100)
    p.add_argument("--rate", type=float, default=200.0)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--idle", type=int, default=5000)
    p.add_argument("--idle-kind", choices=("sse", "ws"), default="sse", help="idle clients' kind")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--profile", metavar="DIR")
    p.add_argument("--role", choices=("clients",), help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--expect", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    import uvloop

    if args.role == "clients":
        uvloop.run(clients(args.port, args.sse, args.ws, args.expect, 20.0))
        return
    args.hub_src = [str(Path(src).resolve()) for src in args.hub_src or [ROOT]]
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    args.only = args.only or ["live", "idle"]
    uvloop.run(conduct(args))


if __name__ == "__main__":
    main()
