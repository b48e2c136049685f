"""Dump baseline benchmark: the first full copy of N small files, by Resource Dump against
one GET per resource.

For each ``--files`` size, a directory of N files (``--size`` bytes each, or a range
``A-B`` drawn per file with a fixed seed; random bytes, so the ZIP packages compress
nothing and the figures show the protocol's overhead, not a compressor's luck) is served by
two real ``rshub source`` processes on 127.0.0.1: one with ``--dumps``, one without
(``rshub sync`` takes the Resource Dump whenever the Capability List offers one; a Source
without ``--dumps`` offers none, so its Destination makes one GET per resource). Each
Source's ``--base-url`` is a forwarder of ``bench/countingproxy.py``, so every request a
Destination makes, files and packages included, goes through it and is counted: HTTP
requests, and TCP payload bytes both ways (headers and bodies).

Once both Sources list all N files (their Resource Lists are polled) and the Resource Dump
is written (requested once beforehand, its time reported apart: it is the Source's cost,
paid once per snapshot), ``rshub sync --source URL --once`` copies each into an empty
mirror, the two modes in alternating order (by size and repeat). Per mode: wall time,
requests and bytes on the wire (the sync process's, from the proxy), and transfer
efficiency, bytes of content / bytes on the wire (the synchronization-model paper's). Each
mirror is then compared with the directory, file by file, by SHA-256.

Usage: ``python bench/dump_baseline.py [--files 10000,100000] [--size 256-4096]
[--repeat 1] [--record]``. Prints a Markdown table; ``--record`` appends the run to
``bench/results/dump_baseline.jsonl``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.render import append_record, commit_of, this_machine, utc_now
from tests.support import free_port

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
SEED = 20261202
#: The Sources' readiness: hashing N files and sealing their Change Dump packages.
READY_TIMEOUT = 1800.0
SYNC_TIMEOUT = 1800.0
MODES = ("dump", "get")


@dataclass
class Measured:
    mode: str
    seconds: float
    requests: int
    wire: int
    content: int

    @property
    def efficiency(self) -> float:
        return self.content / self.wire


def make_files(root: Path, files: int, low: int, high: int) -> int:
    """N files of random bytes in 100 subdirectories; the bytes of content in all."""
    rng = random.Random(SEED)
    total = 0
    for i in range(files):
        path = root / f"d{i % 100:02d}" / f"f{i:06d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        size = rng.randint(low, high)
        path.write_bytes(rng.randbytes(size))
        total += size
    return total


def digests(root: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every file under ``root``, ``.rshub`` left out."""
    out = {}
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if path.is_file() and ".rshub" not in rel.parts:
            out[rel.as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def http_get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=120) as resp:
            body: bytes = resp.read()
            return body
    except OSError:
        return None


def listed(base: str) -> int:
    """Resources the Source's Resource List (or its index's pages) lists now."""
    body = http_get(f"{base}/resourcelist.xml")
    if body is None:
        return -1
    if b"<sitemapindex" not in body:
        return body.count(b"<url>")
    total = 0
    for loc in re.findall(rb"<loc>([^<]+)</loc>", body):
        page = http_get(loc.decode())
        if page is None:
            return -1
        total += page.count(b"<url>")
    return total


def wait_until(what: str, check: Callable[[], bool], timeout: float, every: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"not within {timeout:.0f} s: {what}")
        time.sleep(every)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class Proxy:
    """``bench/countingproxy.py`` as a child process, asked for its counts on stdin."""

    def __init__(self, specs: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "countingproxy.py"), *specs],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != b"ready":
            raise SystemExit("countingproxy did not start")

    def _ask(self, what: bytes) -> bytes:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(what + b"\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline()

    def bytes(self) -> dict[str, list[int]]:
        """[bytes from client, bytes to client] per ``"NAME PID"``."""
        answer: dict[str, list[int]] = json.loads(self._ask(b"snap"))
        return answer

    def requests(self) -> dict[str, int]:
        """HTTP requests per ``"NAME PID"``."""
        answer: dict[str, int] = json.loads(self._ask(b"requests"))
        return answer

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # it ends at the end of its stdin
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            stop(self.proc)


def closed_pages(base: str) -> int:
    body = http_get(f"{base}/changedump.xml")
    return -1 if body is None else body.count(b"<url>")


def run_size(files: int, low: int, high: int, order: list[str], work: Path) -> list[Measured]:
    root = work / "dir"
    content = make_files(root, files, low, high)
    truth = digests(root)
    ports = {mode: (free_port(), free_port()) for mode in MODES}  # (source, proxy)
    proxy = Proxy([f"{mode}:{proxy}:{source}" for mode, (source, proxy) in ports.items()])
    sources: dict[str, subprocess.Popen[bytes]] = {}
    log = open(work / "source.log", "ab")  # closed in the finally below
    try:
        for mode, (source, listen) in ports.items():
            argv = [sys.executable, "-m", "rshub", "source", str(root), "--port", str(source)]
            argv += ["--base-url", f"http://127.0.0.1:{listen}"]
            argv += ["--state", str(work / f"state-{mode}.json")]
            argv += ["--dumps", "--dump-dir", str(work / "dumps")] if mode == "dump" else []
            sources[mode] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        began = time.monotonic()
        for mode, (source, _) in ports.items():
            base = f"http://127.0.0.1:{source}"
            wait_until(f"{mode} Source lists {files}", lambda b=base: listed(b) == files,
                       READY_TIMEOUT, every=2.0)  # fmt: skip
        dump_base = f"http://127.0.0.1:{ports['dump'][0]}"
        # Sealed Change Dump packages (one per closed Change List page) are written in the
        # background: let them finish before anything is timed.
        wait_until("Change Dump sealed", lambda: closed_pages(dump_base) >= files // 1000 - 1,
                   READY_TIMEOUT, every=2.0)  # fmt: skip
        print(f"  {files:,} files: both Sources ready in {time.monotonic() - began:.0f} s",
              file=sys.stderr)  # fmt: skip
        began = time.monotonic()
        if http_get(f"{dump_base}/resourcedump.xml") is None:
            raise SystemExit("no Resource Dump")
        written = time.monotonic() - began
        print(f"  Resource Dump written in {written:.1f} s", file=sys.stderr)
        out = []
        for mode in order:
            listen = ports[mode][1]
            mirror = work / f"mirror-{mode}"
            argv = [sys.executable, "-m", "rshub", "sync", "--once", "--no-progress"]
            argv += ["--source", f"http://127.0.0.1:{listen}/.well-known/resourcesync"]
            # One clock for Source and Destination: no skew to tolerate. (With the default
            # 30 s, a file created within 30 s before the baseline is fetched again from
            # the Change List, its lastmod there being when the Source saw it.)
            argv += ["--dest", str(mirror), "--overlap", "0"]
            bytes_before, requests_before = proxy.bytes(), proxy.requests()
            began = time.monotonic()
            with open(work / f"sync-{mode}.log", "ab") as sync_log:
                sync = subprocess.Popen(argv, stdout=sync_log, stderr=subprocess.STDOUT)
                rc = sync.wait(SYNC_TIMEOUT)
            seconds = time.monotonic() - began
            if rc != 0:
                raise SystemExit(f"rshub sync ({mode}) exited {rc}: see {work}/sync-{mode}.log")
            bytes_after, requests_after = proxy.bytes(), proxy.requests()
            key = f"{mode} {sync.pid}"
            wire = sum(bytes_after.get(key, [0, 0])) - sum(bytes_before.get(key, [0, 0]))
            requests = requests_after.get(key, 0) - requests_before.get(key, 0)
            unresolved = [k for k in bytes_after if k.endswith(" ?") or k.endswith(" -1")]
            if unresolved:
                print(f"  warning: connections of unknown clients: {unresolved}", file=sys.stderr)
            got = digests(mirror / "http" / f"127.0.0.1_{listen}" / "files")
            if got != truth:
                missing = len(truth.keys() - got.keys())
                wrong = sum(1 for k in truth.keys() & got.keys() if truth[k] != got[k])
                raise SystemExit(f"{mode}: the mirror differs: {missing} missing, {wrong} wrong")
            shutil.rmtree(mirror)
            m = Measured(mode, seconds, requests, wire, content)
            print(f"  {mode}: {seconds:.1f} s, {requests:,} requests, {wire:,} B on the wire, "
                  f"efficiency {m.efficiency:.3f}; mirror equals the directory",
                  file=sys.stderr)  # fmt: skip
            out.append(m)
        out.append(Measured("write", written, 0, 1, 0))
        return out
    finally:
        for proc in sources.values():
            stop(proc)
        proxy.close()
        log.close()


def record(
    rows: dict[int, list[list[Measured]]], command: str, date: str, size: str
) -> dict[str, object]:
    figures: list[dict[str, object]] = []
    for files, runs in rows.items():

        def of(mode: str, runs: list[list[Measured]] = runs) -> list[Measured]:
            return [m for run in runs for m in run if m.mode == mode]

        dump, get, write = of("dump"), of("get"), of("write")
        n = f"{files:,} files"
        pairs = list(zip(dump, get, strict=True))
        figures += [
            {"name": f"{n}: wall time, Resource Dump", "unit": "s",
             "runs": [round(m.seconds, 2) for m in dump],
             "baseline": {"name": "one GET per resource",
                          "runs": [round(m.seconds, 2) for m in get]},
             "ratio": {"runs": [round(d.seconds / g.seconds, 3) for d, g in pairs]}},
            {"name": f"{n}: requests, Resource Dump", "unit": "requests",
             "runs": [m.requests for m in dump],
             "baseline": {"name": "one GET per resource", "runs": [m.requests for m in get]}},
            {"name": f"{n}: bytes on the wire, Resource Dump", "unit": "B",
             "runs": [m.wire for m in dump],
             "baseline": {"name": "one GET per resource", "runs": [m.wire for m in get]},
             "ratio": {"runs": [round(d.wire / g.wire, 3) for d, g in pairs]}},
            {"name": f"{n}: transfer efficiency, Resource Dump", "unit": "ratio",
             "runs": [round(m.efficiency, 3) for m in dump],
             "baseline": {"name": "one GET per resource",
                          "runs": [round(m.efficiency, 3) for m in get]}},
            {"name": f"{n}: Resource Dump written by the Source", "unit": "s",
             "runs": [round(m.seconds, 2) for m in write]},
        ]  # fmt: skip
    return {
        "bench": "dump_baseline",
        "command": command,
        "date": date,
        "until": utc_now(),
        "commit": commit_of(ROOT),
        "machine": this_machine(),
        "runs": len(next(iter(rows.values()))),
        "figures": figures,
        "note": f"files of {size} random bytes; rshub sync --source --once --overlap 0 into "
        "an empty mirror, the two modes alternating; each mirror equal to the directory by SHA-256",
    }


def table(rows: dict[int, list[list[Measured]]]) -> str:
    lines = [
        "| files | mode | wall time | requests | bytes on the wire | efficiency |",
        "|---|---|---|---|---|---|",
    ]
    for files, runs in rows.items():
        for run in runs:
            by = {m.mode: m for m in run}
            for mode in MODES:
                m = by[mode]
                lines.append(f"| {files:,} | {mode} | {m.seconds:.1f} s | {m.requests:,} | "
                             f"{m.wire:,} B | {m.efficiency:.3f} |")  # fmt: skip
            d, g = by["dump"], by["get"]
            ratios = f"{d.seconds / g.seconds:.3f}× | {d.requests / g.requests:.4f}×"
            lines.append(f"| {files:,} | dump ÷ get | {ratios} | {d.wire / g.wire:.3f}× | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--files", default="10000,100000", help="sizes, comma-separated")
    parser.add_argument("--size", default="256-4096", help="bytes per file, or a range A-B")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--record", action="store_true", help="append the run to results")
    args = parser.parse_args()
    low, _, high = args.size.partition("-")
    sizes = [int(x) for x in args.files.split(",")]
    date = utc_now()
    rows: dict[int, list[list[Measured]]] = {}
    for i, files in enumerate(sizes):
        for r in range(args.repeat):
            order = list(MODES) if (i + r) % 2 == 0 else list(reversed(MODES))
            print(f"{files:,} files, {' then '.join(order)}", file=sys.stderr)
            with tempfile.TemporaryDirectory(prefix="rshub-bench-dump-") as tmp:
                run = run_size(files, int(low), int(high or low), order, Path(tmp))
            rows.setdefault(files, []).append(run)
    print(table(rows))
    if args.record:
        command = "bench/dump_baseline.py " + " ".join(sys.argv[1:])
        print(f"appended to {append_record(record(rows, command.strip(), date, args.size))}")


if __name__ == "__main__":
    main()
