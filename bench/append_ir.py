"""Redis's instructions per publish: the append script under callgrind, two checkouts.

Figure 1 of ``bench/hub.py`` (single-change publishes) shares the hub's core with Redis,
which runs ``hub/store/scripts/append.lua`` once per publish. Timings of Redis swing with
the machine; instruction counts do not. This starts one ``redis-server`` (AOF,
``everysec``, as the benches) under ``valgrind --tool=callgrind`` with instrumentation off,
loads the script of this checkout and of ``--hub-src``, and for each, alternating, counts
the instructions of ``--calls`` single-change ``EVALSHA`` calls (8 per pipeline, with the
arguments ``EventStore`` passes at the default settings: a 7-day age bound, 1,000,000
events, a hold), first on a fresh topic and then on one whose stream already holds
``--long`` entries (whatever the script reads must not grow with the stream).

    .venv/bin/python bench/append_ir.py --hub-src ../main-checkout

Needs ``valgrind`` (Debian's package). Repeat runs agree within ~0.5%.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hub.store import keys  # noqa: E402
from hub.store.embedded_redis import find_redis_server  # noqa: E402
from tests.support import free_port  # noqa: E402

EVENT = (
    b'{"loc":"http://bench/x/1?t=0","lastmod":"2024-01-01T00:00:00Z","change":"updated",'
    b'"hash":"md5:00000000000000000000000000000001","length":1001,"type":"text/html"}'
)
DAY_MS = 86_400_000


def script_of(checkout: Path) -> str:
    """The append script of ``checkout``, its ``$NAME`` placeholders filled in."""
    text = (checkout / "hub/store/scripts/append.lua").read_text(encoding="utf-8")
    return re.sub(r"\$([A-Z_]+)", lambda m: keys.SCRIPT_NAMES[m.group(1)], text)


class Traced:
    """``redis-server`` under callgrind, counting only between :meth:`count`'s marks."""

    def __init__(self, workdir: Path) -> None:
        self.out = workdir / "callgrind.out"
        port = free_port()
        self.proc = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={self.out}",
                find_redis_server(),
                *("--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir)),
                *("--appendonly", "yes", "--appendfsync", "everysec", "--save", ""),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.client = redis.Redis(port=port)
        deadline = time.monotonic() + 60
        while True:
            try:
                self.client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("redis-server under callgrind did not start") from None
                time.sleep(0.1)

    def _control(self, *args: str) -> None:
        subprocess.run(
            ["callgrind_control", *args, str(self.proc.pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=True,
            timeout=60,
        )

    def run(self, work: list[list[object]]) -> None:
        """Send the pipelines of ``work`` (each a list of calls), one after another."""
        for calls in work:
            pipe = self.client.pipeline(transaction=False)
            for call in calls:
                pipe.execute_command(*call)  # type: ignore[no-untyped-call]
            pipe.execute()

    def count(self, work: list[list[object]]) -> int:
        """Instructions Redis spent on the pipelines of ``work`` (each a list of calls)."""
        for old in self.out.parent.glob(self.out.name + "*"):
            old.unlink()
        self._control("-z")
        self._control("-i", "on")
        self.run(work)
        self._control("-i", "off")
        self._control("-d")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            totals = [
                int(line.split()[1])
                for dump in self.out.parent.glob(self.out.name + "*")
                for line in dump.read_text().splitlines()
                if line.startswith(("summary:", "totals:"))
            ]
            if totals:
                return max(totals)
            time.sleep(0.1)
        raise RuntimeError("callgrind wrote no dump")

    def close(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)


def append_calls(sha: str, topic: str, first: int, n: int) -> list[list[object]]:
    """``n`` single-change appends to ``topic`` as ``EventStore`` makes them, 8 a pipeline."""
    script_keys = (
        keys.events(topic),
        keys.resources(topic),
        keys.topic_meta(topic),
        keys.holds(topic),
        keys.cursors(topic),
    )
    calls: list[object] = []
    for i in range(first, first + n):
        now = int(time.time() * 1000)
        packed = b"http://bench/x/%d\0updated\0" % (i % 1000) + EVENT + b"\0"
        calls.append(
            [
                *("EVALSHA", sha, len(script_keys), *script_keys),
                *("digest", 86_400, 1_000_000, f"{now - 7 * DAY_MS}-0", now, packed),
                *(100_000, now - 14 * DAY_MS),
            ]
        )
    return [calls[i : i + 8] for i in range(0, len(calls), 8)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hub-src", type=Path, help="the other checkout (e.g. main)")
    parser.add_argument("--calls", type=int, default=2000, help="calls counted per figure")
    parser.add_argument("--long", type=int, default=20_000, help="entries of the long stream")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    checkouts = {"this checkout": ROOT}
    if args.hub_src:
        checkouts[f"--hub-src {args.hub_src}"] = args.hub_src.resolve()
    with tempfile.TemporaryDirectory(prefix="append-ir-") as tmp:
        traced = Traced(Path(tmp))
        try:
            shas = {name: traced.client.script_load(script_of(p)) for name, p in checkouts.items()}
            print(f"redis-server under callgrind; {args.calls} calls per figure", flush=True)
            for round_ in range(args.rounds):
                for name, sha in shas.items():
                    traced.client.flushall()
                    traced.run(append_calls(sha, "long", 0, args.long))
                    fresh = traced.count(append_calls(sha, "fresh", 0, args.calls))
                    long_ = traced.count(append_calls(sha, "long", args.long, args.calls))
                    print(
                        f"round {round_ + 1}, {name}: {fresh / args.calls:,.0f} instructions "
                        f"per publish on a fresh topic, {long_ / args.calls:,.0f} on a "
                        f"{args.long:,}-entry stream",
                        flush=True,
                    )
        finally:
            traced.close()


if __name__ == "__main__":
    main()
