"""Source benchmark: ``rshub source`` on a directory of 10,000 files, end to end.

One run, everything on 127.0.0.1, real processes: a hub (``rshub serve``, embedded Redis),
``rshub source DIR --topic T`` and ``rshub sync --topic T``. Measured:

1. **first start**: from the Source's start until the hub stored all 10,000 creations
   (hashing every file, md5 and sha-256, in threads), beside **a restart** with nothing
   changed (every file's stamp checked, none read again, nothing pushed): the ratio is
   what the stamps save;
2. while the first start hashes, the Source's own answers (``/capabilitylist.xml``,
   requested every 10 ms): the slowest, beside the median answer once it is idle: hashing
   runs off the event loop, so serving does not stall;
3. ``rshub sync --once`` making its baseline of the 10,000 through the hub (fetching each
   file from the Source);
4. a followed change: ``CHANGES`` files rewritten one every ``SPACING`` s, the time from the
   write until a following ``rshub sync`` (WebSocket push) holds the new bytes (the file is
   checked every millisecond). It includes ``watchfiles``' batching (at most 1.6 s).

Usage: ``python bench/source.py [--files N]``. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support import HubProcess, free_port

CHANGES = 30
SPACING = 0.2
TOPIC = "bench-source"


def rshub(log: Path, *args: str) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "rshub", *args], stdout=out, stderr=subprocess.STDOUT
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def pushed(state: Path) -> tuple[int, int]:
    """(changes recorded, changes pushed) in the Source's state file."""
    try:
        data = json.loads(state.read_text())
    except (OSError, ValueError):
        return 0, 0
    return len(data.get("history", [])), int(data.get("pushed", 0))


async def wait(condition: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.01)


async def answers(url: str, until: asyncio.Event) -> list[float]:
    """Latencies of GET ``url`` every 10 ms until ``until`` is set."""
    out: list[float] = []
    async with aiohttp.ClientSession() as session:
        while not until.is_set():
            began = time.monotonic()
            try:
                async with session.get(url) as resp:
                    await resp.read()
                out.append(time.monotonic() - began)
            except aiohttp.ClientError:
                pass  # not listening yet
            await asyncio.sleep(0.01)
    return out


async def main(files: int) -> None:
    with tempfile.TemporaryDirectory(prefix="rshub-bench-source-") as tmp:
        work = Path(tmp)
        root, dest, state = work / "dir", work / "mirror", work / "source.json"
        for i in range(files):
            path = root / f"d{i % 100:02d}" / f"f{i:05d}.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(f"resource {i}\n".encode() * 80)  # ~1 KiB
        (work / "hub").mkdir()
        hub = HubProcess(str(work / "hub")).start()
        port = free_port()
        args = ["source", str(root), "--port", str(port), "--state", str(state)]
        args += ["--hub", hub.url, "--topic", TOPIC]
        try:
            done = asyncio.Event()
            capabilities = f"http://127.0.0.1:{port}/capabilitylist.xml"
            probe = asyncio.create_task(answers(capabilities, done))
            began = time.monotonic()
            source = rshub(work / "source.log", *args)
            await wait(lambda: pushed(state) == (files, files), 600, "first push")
            first = time.monotonic() - began
            done.set()
            busy = await probe
            idle_done = asyncio.Event()
            idle_probe = asyncio.create_task(answers(capabilities, idle_done))
            await asyncio.sleep(2)
            idle_done.set()
            idle = await idle_probe
            stop(source)

            began = time.monotonic()
            source = rshub(work / "source.log", *args)
            log = work / "source.log"
            await wait(
                lambda: log.read_text(errors="replace").count("rshub source: serving") == 2,
                300,
                "restart",
            )
            restart = time.monotonic() - began
            assert pushed(state) == (files, files), pushed(state)

            began = time.monotonic()
            baseline = rshub(work / "sync.log", "sync", "--hub", hub.url, "--topic", TOPIC,
                             "--dest", str(dest), "--once")  # fmt: skip
            baseline.wait(600)
            baselined = time.monotonic() - began
            mirrored = dest / "http" / f"127.0.0.1_{port}" / "files"
            assert sum(1 for p in mirrored.rglob("*") if p.is_file()) == files

            follower = rshub(work / "sync.log", "sync", "--hub", hub.url, "--topic", TOPIC,
                             "--dest", str(dest))  # fmt: skip
            await asyncio.sleep(2)  # connected (its log says so; the first change is timed)
            latencies = []
            for n in range(CHANGES):
                name = f"d{n % 100:02d}/f{n:05d}.txt"
                data = f"change {n}\n".encode()
                written = time.monotonic()
                (root / name).write_bytes(data)
                target = mirrored / name
                await wait(lambda t=target, d=data: t.read_bytes() == d, 60, name)
                latencies.append(time.monotonic() - written)
                await asyncio.sleep(SPACING)
            stop(follower)
            stop(source)
        finally:
            hub.stop()
        ms = 1000.0

        def spread(values: list[float]) -> str:
            return f"{max(values) * ms:.0f} ms, {statistics.median(values) * ms:.1f} ms"

        rows = [
            (f"first start: {files} files hashed and pushed", f"{first:.1f} s"),
            ("restart, nothing changed (stamps only)", f"{restart:.2f} s"),
            ("first start / restart", f"{first / restart:.1f}x"),
            ("/capabilitylist.xml while hashing: slowest, median", spread(busy)),
            ("/capabilitylist.xml idle: slowest, median", spread(idle)),
            (f"rshub sync --once baseline of {files}", f"{baselined:.1f} s"),
            (f"change to mirror by push ({CHANGES} changes): slowest, median", spread(latencies)),
        ]
        print("| measure | value |\n|---|---|")
        for name, value in rows:
            print(f"| {name} | {value} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    asyncio.run(main(parser.parse_args().files))
