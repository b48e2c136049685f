"""Sync benchmark: source-change-to-mirror-updated latency (push and polling), baseline time.

One run, everything on 127.0.0.1, real processes:

1. a hub (``python -m rshub serve``, embedded Redis) and an in-process file server (the
   Source) serving 10,000 small resources, all published to the hub;
2. ``rshub sync --once`` makes a baseline of the 10,000 from the hub's Resource List: timed;
3. two ``rshub sync`` processes follow one topic, one by WebSocket push, one polling the
   hub's Change Lists every ``POLL_INTERVAL`` s; ``CHANGES`` changes are made at the Source
   and published, one every ``SPACING`` s; for each, the time until each mirror holds the new
   bytes is measured (the file is checked every millisecond).

Usage: ``python bench/sync.py``. Prints a Markdown table.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support import free_port

RESOURCES = 10_000
CHANGES = 60
SPACING = 0.15
POLL_INTERVAL = 1.0


def notification(changes: list[tuple[str, str]]) -> bytes:
    urls = "".join(
        f'<url><loc>{loc}</loc><lastmod>{lastmod}</lastmod><rs:md change="updated"/></url>'
        for loc, lastmod in changes
    )
    return (
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:rs="http://www.openarchives.org/rs/terms/">'
        '<rs:md capability="changelist-notification"/>' + urls + "</urlset>"
    ).encode()


def start_hub(data: Path, port: int) -> subprocess.Popen[bytes]:
    with open(data / "hub.log", "wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rshub",
                "serve",
                "--port",
                str(port),
                "--data-dir",
                str(data),
                "--allow-private-callbacks",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return proc
        except OSError:
            time.sleep(0.05)
    raise SystemExit("hub did not start")


def sync(data: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    with open(data / f"{name}.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "rshub", "sync", *args], stdout=subprocess.DEVNULL, stderr=log
        )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def main() -> None:
    files: dict[str, bytes] = {f"r{i}": f"resource {i} v0\n".encode() for i in range(RESOURCES)}

    async def serve(request: web.Request) -> web.Response:
        data = files.get(request.match_info["name"])
        if data is None:
            raise web.HTTPNotFound()
        return web.Response(body=data)

    app = web.Application()
    app.router.add_get("/files/{name}", serve)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    src_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", src_port).start()
    source = f"http://127.0.0.1:{src_port}"

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        hub_port = free_port()
        hub_url = f"http://127.0.0.1:{hub_port}"
        hub = start_hub(data, hub_port)
        procs: list[subprocess.Popen[bytes]] = []
        try:
            async with aiohttp.ClientSession() as session:

                async def publish(changes: list[tuple[str, str]]) -> None:
                    async with session.post(
                        f"{hub_url}/topics/bench",
                        data=notification(changes),
                        headers={"Content-Type": "application/xml"},
                    ) as r:
                        assert r.status == 202, await r.text()

                names = list(files)
                for i in range(0, RESOURCES, 1000):
                    await publish(
                        [
                            (f"{source}/files/{n}", "2026-01-01T00:00:00Z")
                            for n in names[i : i + 1000]
                        ]
                    )

                # Baseline of 10,000 resources from the hub's Resource List.
                t0 = time.monotonic()
                base = sync(
                    data,
                    "baseline",
                    "--dest",
                    str(data / "baseline"),
                    "--hub",
                    hub_url,
                    "--topic",
                    "bench",
                    "--once",
                    "--no-progress",
                )
                assert await asyncio.to_thread(base.wait) == 0, (data / "baseline.log").read_text()
                baseline_s = time.monotonic() - t0

                # Live followers: push (WebSocket) and polling.
                dests = {"push": data / "push", "poll": data / "poll"}
                procs.append(
                    sync(
                        data,
                        "push",
                        "--dest",
                        str(dests["push"]),
                        "--hub",
                        hub_url,
                        "--topic",
                        "bench",
                        "--no-progress",
                        "--concurrency",
                        "32",
                    )
                )
                procs.append(
                    sync(
                        data,
                        "poll",
                        "--dest",
                        str(dests["poll"]),
                        "--hub",
                        hub_url,
                        "--topic",
                        "bench",
                        "--via",
                        "poll",
                        "--interval",
                        str(POLL_INTERVAL),
                        "--no-progress",
                        "--concurrency",
                        "32",
                    )
                )
                rel = Path("http", f"127.0.0.1_{src_port}", "files")
                probe = rel / names[-1]
                deadline = time.monotonic() + 60
                while not all((d / probe).exists() for d in dests.values()):
                    if time.monotonic() > deadline:
                        raise SystemExit("followers did not baseline in time")
                    await asyncio.sleep(0.05)

                latencies: dict[str, list[float]] = {"push": [], "poll": []}
                pending: list[tuple[float, Path, bytes]] = []

                async def watch() -> None:
                    while pending or not done.is_set():
                        now = time.monotonic()
                        for item in list(pending):
                            t, path, want = item
                            for mode, dest in dests.items():
                                key = (mode, path)
                                if key in seen:
                                    continue
                                try:
                                    if (dest / path).read_bytes() == want:
                                        latencies[mode].append(now - t)
                                        seen.add(key)
                                except OSError:
                                    pass
                            if all((m, path) in seen for m in dests):
                                pending.remove(item)
                        await asyncio.sleep(0.001)

                seen: set[tuple[str, Path]] = set()
                done = asyncio.Event()
                watcher = asyncio.create_task(watch())
                for k in range(CHANGES):
                    name = names[k]
                    files[name] = f"resource {name} v1 {k}\n".encode()
                    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                    t = time.monotonic()
                    await publish([(f"{source}/files/{name}", stamp)])
                    pending.append((t, rel / name, files[name]))
                    await asyncio.sleep(SPACING)
                done.set()
                await asyncio.wait_for(watcher, 30)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(10)
            hub.terminate()
            hub.wait(15)
            await runner.cleanup()

    print(
        f"| measure | value |\n|---|---|\n"
        f"| baseline, {RESOURCES:,} small resources from the hub's Resource List | "
        f"{baseline_s:.1f} s ({RESOURCES / baseline_s:,.0f} resources/s) |"
    )
    for mode, label in (
        ("push", "push (WebSocket)"),
        ("poll", f"polling, interval {POLL_INTERVAL:g} s"),
    ):
        values = [v * 1000 for v in latencies[mode]]
        print(
            f"| change-to-mirror latency, {label}, n={len(values)} | "
            f"p50 {pct(values, 0.5):.0f} ms, p99 {pct(values, 0.99):.0f} ms, "
            f"mean {statistics.mean(values):.0f} ms |"
        )
    print(f"\ncpus: {os.cpu_count()}, python {sys.version.split()[0]}")


if __name__ == "__main__":
    asyncio.run(main())
