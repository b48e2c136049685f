"""Instructions per publish of ``rshub serve`` under callgrind, at figure 1's load.

Figure 1 of ``bench/hub.py`` (single-change publishes at c=32, one aiohttp client) swings by
±30% from run to run on a shared machine; instruction counts do not. This starts a
``redis-server`` (AOF, ``everysec``) and ``rshub serve`` under ``valgrind --tool=callgrind``
(from ``--hub-src``, like ``bench/hub.py``), warms it up with 400 publishes, waits for the
deferred start-up work (the TLS context, prometheus_client) to be done, zeroes the counters,
sends ``--publishes`` more as figure 1 does, and prints the instructions per publish of the
event loop's thread (and of all threads).

    .venv/bin/python bench/publish_ir.py --hub-src ../main-checkout --publishes 1500

Batches differ with the pace (the hub is ~50x slower under callgrind), so compare checkouts
run side by side, alternating; repeat runs agree within ~1%.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.hub import notification
from tests.support import free_port

CONCURRENCY = 32
WARM_UP = 400


async def post(session: aiohttp.ClientSession, url: str, first: int, count: int) -> None:
    pool = [notification(i, 1) for i in range(100)]  # figure 1's bodies
    todo = iter(range(first, first + count))

    async def worker() -> None:
        for i in todo:
            headers = {"Content-Type": "application/xml"}
            async with session.post(url, data=pool[i % 100], headers=headers) as resp:
                await resp.read()
                if resp.status != 202:
                    raise RuntimeError(f"publish answered {resp.status}")

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


async def drive(port: int, pid: int, count: int, settle: float) -> None:
    base = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as session:
        deadline = time.monotonic() + 300
        while True:  # as bench/hub.py: a /healthz first, on the same client
            try:
                async with session.get(f"{base}/healthz") as resp:
                    if resp.status == 200:
                        break
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the hub did not come up")
            await asyncio.sleep(0.5)
        await post(session, f"{base}/topics/single", 0, WARM_UP)
        await asyncio.sleep(settle)
        await control("-z", pid)  # zero the counters
        await post(session, f"{base}/topics/single", WARM_UP, count)
        await control("-d", pid)  # dump them


async def control(option: str, pid: int) -> None:
    proc = await asyncio.create_subprocess_exec(
        "callgrind_control", option, str(pid), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    if await proc.wait():
        raise RuntimeError(f"callgrind_control {option} failed")


def loop_instructions(dump: Path) -> tuple[int, int]:
    """All threads' instructions in ``dump``, and the event loop thread's."""
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dump)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    loop = 0
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) ", line)
        if m and ("Loop__run_until_complete" in line or "Loop__run " in line):
            loop = max(loop, int(m.group(1).replace(",", "")))
    total = 0
    for line in dump.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            total = int(line.split()[1])
    return total, loop


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hub-src", default=".", help="the checkout to run rshub serve from")
    parser.add_argument("--publishes", type=int, default=1500)
    parser.add_argument("--settle", type=float, default=20.0, help="seconds before zeroing")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="publish-ir-"))
    redis_port, hub_port = free_port(), free_port()
    redis_server = shutil.which("redis-server", path=str(Path(sys.executable).parent))
    redis = subprocess.Popen(
        [redis_server or "redis-server", "--port", str(redis_port), "--dir", str(tmp),
         "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    out = tmp / "callgrind.out"
    hub = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
         "-m", "rshub", "serve", "--host", "127.0.0.1", "--port", str(hub_port),
         "--redis-url", f"redis://127.0.0.1:{redis_port}/0", "--log-level", "warning"],
        cwd=args.hub_src,
        env={"RSHUB_UVLOOP": "true", "PATH": "/usr/bin:/bin"},
        stdout=(tmp / "hub.log").open("w"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        asyncio.run(drive(hub_port, hub.pid, args.publishes, args.settle))
        time.sleep(1)
        dump = max(tmp.glob("callgrind.out*"), key=lambda p: p.stat().st_mtime)
        total, loop = loop_instructions(dump)
    finally:
        hub.terminate()
        try:
            hub.wait(30)
        except subprocess.TimeoutExpired:
            hub.kill()
        redis.terminate()
        redis.wait()
        for path in tmp.iterdir():  # the dump and the log are kept, Redis's files not
            if not path.name.startswith(("callgrind.out", "hub.log")):
                shutil.rmtree(path) if path.is_dir() else path.unlink()
    n = args.publishes
    print(
        f"{args.hub_src}: {loop / n / 1000:.0f} k instructions per publish in the event loop's "
        f"thread ({total / n / 1000:.0f} k all threads; {n} publishes; dump {dump})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
