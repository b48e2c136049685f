"""Benchmark the publisher library into a local hub, beside the hub's own ingest baseline.

Run ``.venv/bin/python bench/publisher.py`` from the repository root (``--quick`` for a
smaller run; about 30 s in full). It starts, on 127.0.0.1, an embedded ``redis-server``
(:class:`hub.store.embedded_redis.EmbeddedRedis`) in a temp dir and the hub
(``python -m rshub serve --redis-url ...``) in its own process, then measures from this
process, each figure the best of ``ROUNDS`` rounds, every round on a fresh topic:

* *baseline*: raw ``aiohttp`` POSTs of pre-built 1,000-change notifications, one at a time
  (the hub's ingest rate with no client-side work: the ceiling for the library);
* *batching on*: :class:`publisher.Publisher` with ``BatchPolicy(max_changes=1000)``, fed
  typed changes as fast as :meth:`~publisher.Publisher.put` takes them, until the hub has
  acknowledged every one (``close()``);
* *batching on, default policy*: the same with ``BatchPolicy()`` (500 changes, 50 ms);
* *batching off*: ``BatchPolicy.off()``, one POST per change.

The changes are built before the clock starts (the library's input is typed changes);
per-change checks, batching, serialization, HTTP and the hub's answer are timed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hub.store.embedded_redis import EmbeddedRedis  # noqa: E402
from publisher import BatchPolicy, Publisher, make_change, notification  # noqa: E402
from resourcesync import Entry  # noqa: E402
from tests.support import free_port  # noqa: E402

ROUNDS = 3


def changes(n: int, prefix: str) -> list[Entry]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        make_change(
            f"http://example.org/{prefix}/{i}",
            "updated",
            start + timedelta(milliseconds=i),
            hash=f"md5:{i:032x}",
            length=100 + i,
            type="text/html",
        )
        for i in range(n)
    ]


async def best(label: str, n: int, run: Callable[[int], Awaitable[None]]) -> float:
    rates = []
    for round_ in range(ROUNDS):
        started = time.perf_counter()
        await run(round_)
        rates.append(n / (time.perf_counter() - started))
    rate = max(rates)
    print(
        f"  {label:<32} {rate:>10,.0f} changes/s  (rounds: "
        + ", ".join(f"{r:,.0f}" for r in rates)
        + ")",
        flush=True,
    )
    return rate


async def measure(hub: str, quick: bool) -> dict[str, float]:
    batched_n = 10_000 if quick else 30_000
    single_n = 500 if quick else 2_000
    entries = changes(batched_n, "b")
    singles = entries[:single_n]
    bodies = [notification(entries[i : i + 1000]) for i in range(0, batched_n, 1000)]
    results: dict[str, float] = {}

    async with aiohttp.ClientSession() as session:

        async def raw(round_: int) -> None:
            url = f"{hub}/topics/raw-{round_}"
            for body in bodies:
                async with session.post(
                    url, data=body, headers={"Content-Type": "application/xml"}
                ) as resp:
                    await resp.read()
                    assert resp.status == 202, resp.status

        results["baseline"] = await best("baseline (raw 1,000-change POSTs)", batched_n, raw)

    def library(
        policy: BatchPolicy, name: str, items: list[Entry]
    ) -> Callable[[int], Awaitable[None]]:
        async def run(round_: int) -> None:
            async with Publisher(
                hub, f"{name}-{round_}", batching=policy, max_queued=len(items)
            ) as pub:
                for entry in items:
                    await pub.put(entry)

        return run

    results["on"] = await best(
        "publisher, batching 1,000",
        batched_n,
        library(BatchPolicy(max_changes=1000), "on", entries),
    )
    results["default"] = await best(
        "publisher, default BatchPolicy()", batched_n, library(BatchPolicy(), "default", entries)
    )
    results["off"] = await best(
        "publisher, batching off", single_n, library(BatchPolicy.off(), "off", singles)
    )
    return results


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"hub exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("hub did not become healthy")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller run")
    args = parser.parse_args()
    print(
        f"publisher benchmark: CPython {platform.python_version()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs",
        flush=True,
    )
    with (
        tempfile.TemporaryDirectory(prefix="rshub-bench-") as tmp,
        EmbeddedRedis(Path(tmp) / "redis", appendfsync="everysec") as redis,
    ):
        port = free_port()
        hub = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rshub",
                "serve",
                "--redis-url",
                redis.url,
                "--port",
                str(port),
                "--log-level",
                "WARNING",
            ],
            cwd=tmp,
        )
        try:
            wait_healthy(hub, proc)
            results = asyncio.run(measure(hub, args.quick))
        finally:
            proc.terminate()
            proc.wait(10)
    print(
        f"  library with batching / baseline: {results['on'] / results['baseline']:.2f}; "
        f"batching on / off: {results['on'] / results['off']:.0f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
