"""What push buys a Destination: the synchronization-model experiments, against the real hub.

Per setup (R resources, one change every D seconds), all on 127.0.0.1, all real processes:

- the Source: ``resync-simulator``'s own Source and HTTP interface (``bench/simsource.py``),
  changes at random (create/update/delete, up to 1,000 bytes), each one published to the
  hub by the ``publisher`` library the moment it is made, and logged with its time and MD5
  (the lead states);
- the hub: ``rshub serve`` (embedded Redis);
- ``bench/countingproxy.py``: TCP forwarders in front of the hub, the Source and the WebSub
  callback, counting every byte each Destination process transfers (identified by pid);
- six Destinations, each an ``rshub sync`` process with its own mirror, all following the
  same topic at once: Resource List polling of the hub's Resource List every P1 and P2 s
  (``--resourcelist-interval``), Change List polling of the hub's Change Lists every P1
  and P2 s (``--via poll --interval``), push by WebSocket (``--via ws``) and by WebSub
  (``--via webhook``).

All mirrors start from one ``rshub sync --once`` baseline (hard-linked copies; the mirror
writes by rename, so the copies never share a write). Copy states are observed with
inotify on each mirror directory (every rename/delete, file MD5 read at once). The metrics
(``bench/syncmetrics.py``) are computed over the run window of T seconds: average
consistency sampled every 100 ms, latency of every change made in the window (observed up
to a grace period G after it; a change still out of sync then counts as censored there, a
lower bound), data transfer efficiency = bytes of the representations each
Destination wrote ÷ all bytes it transferred in the window.

Usage: ``python bench/syncmodel.py [--quick]``. Prints one Markdown table per setup.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import dataclasses
import hashlib
import json
import math
import os
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.syncmetrics import (
    Change,
    average_consistency,
    latencies,
    percentile,
    transfer_efficiency,
)

HERE = Path(__file__).resolve().parent
TOPIC = "syncmodel"


@dataclass(frozen=True)
class Plan:
    setups: tuple[tuple[int, float], ...]  # (R, seconds between changes)
    polls: tuple[float, float]
    window: float  # T
    grace: float  # G
    step: float = 0.1


FULL = Plan(
    setups=((1_000, 0.1), (1_000, 10.0), (10_000, 0.1), (10_000, 10.0)),
    polls=(10.0, 100.0),
    window=300.0,
    grace=105.0,
)
# Under two minutes: the 10,000-resource baseline alone takes about 15 s here.
QUICK = Plan(
    setups=((1_000, 0.1), (1_000, 1.0), (10_000, 0.1)), polls=(2.0, 10.0), window=12.0, grace=2.0
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int, children: bool = False) -> float:
    """User + system CPU s of ``pid`` so far (NaN once it is reaped); with ``children``
    also of its waited-for children, as ``wait4`` reports it."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    used = int(fields[11]) + int(fields[12])
    if children:
        used += int(fields[13]) + int(fields[14])
    return used / os.sysconf("SC_CLK_TCK")


@dataclass
class Destination:
    label: str
    args: list[str]
    dest: Path
    webhook: bool = False
    #: Run ``rshub sync --once`` every this many seconds instead of one long process.
    every: float | None = None
    proc: subprocess.Popen[bytes] | None = None
    pids: set[int] = field(default_factory=set)
    #: ``--once`` runs that ended: (pid, when it was reaped, its CPU s from ``wait4``).
    runs: list[tuple[int, float, float]] = field(default_factory=list)
    initial: dict[str, str] = field(default_factory=dict)
    copies: list[Change] = field(default_factory=list)
    writes: list[tuple[float, int]] = field(default_factory=list)  # (time, bytes written)


def launch(log: Path, argv: list[str]) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, *argv], stdout=out, stderr=subprocess.STDOUT)


def _reap(pid: int) -> tuple[float, int, resource.struct_rusage]:
    _, status, usage = os.wait4(pid, 0)
    return time.monotonic(), status, usage


def live_runs_cpu(dests: list[Destination]) -> tuple[float, dict[int, float]]:
    """CPU s so far of each ``--once`` run still alive, and when they were read."""
    live = {}
    for d in dests:
        if d.every is not None and d.proc is not None and d.proc.returncode is None:
            used = cpu_seconds(d.proc.pid, children=True)
            if not math.isnan(used):  # else already reaped: it is in d.runs
                live[d.proc.pid] = used
    return time.monotonic(), live


def runs_cpu(
    d: Destination, before: tuple[float, dict[int, float]], after: tuple[float, dict[int, float]]
) -> float:
    """CPU s the ``--once`` runs of ``d`` used between two :func:`live_runs_cpu` readings:
    runs that ended in between, less what they had used before it, and the run alive at
    the end, less what it had used before (previously only runs that started *and* ended
    in the window were counted, and a run still going at the end was left out)."""
    (t0, at_start), (t1, at_end) = before, after
    used = sum(cpu - at_start.get(pid, 0.0) for pid, reaped, cpu in d.runs if t0 < reaped <= t1)
    return used + sum(cpu - at_start.get(pid, 0.0) for pid, cpu in at_end.items() if pid in d.pids)


async def poll_every(d: Destination, argv: list[str], work: Path, stop: asyncio.Event) -> None:
    """Destination-triggered Change List sync: ``rshub sync --once`` every ``d.every`` s."""
    assert d.every is not None
    while not stop.is_set():
        began = time.monotonic()
        proc = launch(work / f"{d.dest.name}.log", argv)
        d.proc = proc
        d.pids.add(proc.pid)
        reaped, status, usage = await asyncio.to_thread(_reap, proc.pid)
        proc.returncode = os.waitstatus_to_exitcode(status)
        d.runs.append((proc.pid, reaped, usage.ru_utime + usage.ru_stime))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, d.every - (time.monotonic() - began)))


class Watcher:
    """inotify on each mirror's resource directory: copy states as they change."""

    _MASK = 0x8 | 0x80 | 0x200  # IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE
    _OVERFLOW = 0x4000

    def __init__(self, base_uri: str) -> None:
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.base_uri = base_uri
        self.watches: dict[int, tuple[Destination, Path]] = {}
        self.overflowed = False

    def add(self, dest: Destination, directory: Path) -> None:
        wd = self.libc.inotify_add_watch(self.fd, bytes(directory), self._MASK)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {directory}")
        self.watches[wd] = (dest, directory)

    def start(self) -> None:
        asyncio.get_running_loop().add_reader(self.fd, self._read)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self.fd)
        os.close(self.fd)

    def _read(self) -> None:
        try:
            data = os.read(self.fd, 1 << 20)
        except BlockingIOError:
            return
        now = time.monotonic()
        pos = 0
        while pos < len(data):
            wd, mask, _cookie, size = struct.unpack_from("iIII", data, pos)
            name = data[pos + 16 : pos + 16 + size].rstrip(b"\0").decode()
            pos += 16 + size
            if mask & self._OVERFLOW:
                self.overflowed = True
                continue
            if wd not in self.watches or not name or name.startswith(".rshub"):
                continue
            dest, directory = self.watches[wd]
            uri = f"{self.base_uri}/resources/{name}"
            try:
                body = (directory / name).read_bytes()
            except OSError:
                dest.copies.append(Change(now, uri, None))
                continue
            dest.copies.append(Change(now, uri, hashlib.md5(body).hexdigest()))
            dest.writes.append((now, len(body)))


def scan(directory: Path, base_uri: str) -> dict[str, str]:
    out: dict[str, str] = {}
    if directory.is_dir():
        for entry in os.scandir(directory):
            if not entry.name.startswith(".rshub"):
                digest = hashlib.md5(Path(entry.path).read_bytes()).hexdigest()
                out[f"{base_uri}/resources/{entry.name}"] = digest
    return out


def read_truth(path: Path) -> tuple[dict[str, str], list[Change]]:
    initial: dict[str, str] = {}
    changes: list[Change] = []
    for line in path.read_text().splitlines():
        at, uri, digest = line.split("\t")
        if at == "0":
            initial[uri] = digest
        else:
            changes.append(Change(float(at), uri, None if digest == "-" else digest))
    return initial, changes


async def wait_until(what: str, check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        result = check() if callable(check) else check
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"syncmodel: timed out waiting for {what}")
        await asyncio.sleep(0.05)


def http_get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bytes(resp.read())
    except OSError:
        return None


class Proxy:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def snapshot(self) -> dict[str, list[int]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(b"snap\n")
        await self.proc.stdin.drain()
        # The proxy answers once its pending pid lookups are done (at most 30 s).
        line = await asyncio.wait_for(self.proc.stdout.readline(), 40)
        return dict(json.loads(line))


def transferred(
    before: dict[str, list[int]], after: dict[str, list[int]], d: Destination
) -> dict[str, int]:
    """Bytes ``d`` transferred between two snapshots, per forwarder (hub, src, cb)."""
    out = {"hub": 0, "src": 0, "cb": 0}
    for key, (up, down) in after.items():
        name, pid = key.split()
        client = int(pid) if pid.lstrip("-").isdigit() else -1  # "?": lookup unfinished
        if (name in ("hub", "src") and client in d.pids) or (name == "cb" and d.webhook):
            b_up, b_down = before.get(key, [0, 0])
            out[name] += up - b_up + down - b_down
    return out


@dataclass
class Row:
    label: str
    consistency: float
    p50: float
    mean: float
    p99: float
    measured: int
    #: Changes never in sync by the end of observation: counted in the latency figures
    #: at that end (a lower bound), which then read "≥".
    censored: int
    efficiency: float
    required: int
    transferred: int
    cpu: float


async def run_setup(
    plan: Plan, resources: int, delay: float, work: Path, log: list[str]
) -> list[Row]:
    os.makedirs(work)
    ports = {k: free_port() for k in ("hub", "hub_pub", "src", "src_pub", "cb", "cb_pub")}
    hub_pub = f"http://127.0.0.1:{ports['hub_pub']}"
    src_pub = f"http://127.0.0.1:{ports['src_pub']}"
    procs: list[subprocess.Popen[bytes]] = []
    aprocs: list[asyncio.subprocess.Process] = []

    def spawn(name: str, *args: str) -> subprocess.Popen[bytes]:
        with open(work / f"{name}.log", "wb") as out:
            proc = subprocess.Popen([sys.executable, *args], stdout=out, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    watcher: Watcher | None = None
    dests: list[Destination] = []
    pollers: list[asyncio.Task[None]] = []
    stop = asyncio.Event()
    phases: list[str] = []
    mark = time.monotonic()

    def phase(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        phases.append(f"{name} {now - mark:.1f}")
        mark = now

    try:
        hub = spawn(
            "hub", "-m", "rshub", "serve", "--port", str(ports["hub"]), "--data-dir",
            str(work / "hub"), "--base-url", hub_pub, "--log-level", "WARNING",
            # The WebSub Destination's callback is on loopback, like everything here.
            "--allow-private-callbacks",
        )  # fmt: skip
        await wait_until(
            "the hub", lambda: http_get(f"http://127.0.0.1:{ports['hub']}/healthz"), 30
        )
        proxy_proc = await asyncio.create_subprocess_exec(
            sys.executable, str(HERE / "countingproxy.py"),
            f"hub:{ports['hub_pub']}:{ports['hub']}", f"src:{ports['src_pub']}:{ports['src']}",
            f"cb:{ports['cb_pub']}:{ports['cb']}",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        aprocs.append(proxy_proc)
        assert proxy_proc.stdout is not None
        assert await asyncio.wait_for(proxy_proc.stdout.readline(), 20) == b"ready\n"
        phase("hub+proxy")
        proxy = Proxy(proxy_proc)
        truth, go = work / "truth.tsv", work / "go"
        source = spawn(
            "source", str(HERE / "simsource.py"), "--port", str(ports["src"]), "--base-uri",
            src_pub, "--hub", f"http://127.0.0.1:{ports['hub']}", "--topic", TOPIC,
            "--resources", str(resources), "--delay", str(delay), "--truth", str(truth),
            "--go", str(go),
        )  # fmt: skip

        def source_ready() -> bool:
            if source.poll() is not None:
                raise SystemExit(f"Source exited: {(work / 'source.log').read_text()[-2000:]}")
            return b"ready" in (work / "source.log").read_bytes()

        await wait_until("the Source", source_ready, 120)
        await wait_until(
            "the Source's HTTP",
            lambda: (
                http_get(f"{src_pub}/resources/1") is not None
                or http_get(f"{src_pub}/") is not None
            ),
            30,
        )

        phase("source")
        # One baseline, hard-linked into every mirror.
        t0 = time.monotonic()
        base = work / "baseline"
        once = spawn(
            "baseline", "-m", "rshub", "sync", "--dest", str(base), "--hub", hub_pub, "--topic",
            TOPIC, "--once", "--no-progress", "--concurrency", "32",
        )  # fmt: skip
        code = await asyncio.to_thread(once.wait, 600)
        if code != 0:
            raise SystemExit(f"baseline failed: {(work / 'baseline.log').read_text()[-2000:]}")
        log.append(f"baseline of {resources:,} resources: {time.monotonic() - t0:.1f} s")

        phase("baseline")
        p1, p2 = plan.polls
        rl, cl = "Resource List poll", "Change List poll"
        dests = [
            Destination(f"{rl} {p1:g} s", ["--resourcelist-interval", str(p1)], work / "rl1"),
            Destination(f"{rl} {p2:g} s", ["--resourcelist-interval", str(p2)], work / "rl2"),
            Destination(f"{cl} {p1:g} s", ["--once"], work / "cl1", every=p1),
            Destination(f"{cl} {p2:g} s", ["--once"], work / "cl2", every=p2),
            Destination(
                f"`--via poll --interval {p2:g}`", ["--via", "poll", "--interval", str(p2)],
                work / "clf",
            ),
            Destination("push, WebSocket", ["--via", "ws", "-v"], work / "ws"),
            Destination(
                "push, WebSub",
                ["--via", "webhook", "-v", "--listen", f"127.0.0.1:{ports['cb']}",
                 "--callback-url", f"http://127.0.0.1:{ports['cb_pub']}"],
                work / "websub", webhook=True,
            ),
        ]  # fmt: skip
        rel = Path("http", f"127.0.0.1_{ports['src_pub']}", "resources")
        watcher = Watcher(src_pub)
        for d in dests:
            shutil.copytree(base, d.dest, copy_function=os.link)
            (d.dest / rel).mkdir(parents=True, exist_ok=True)
            watcher.add(d, d.dest / rel)
        # Nothing changes before the go signal, and the copies are links of the baseline.
        initial = scan(base / rel, src_pub)
        source_initial, _ = read_truth(truth)
        odd = initial.keys() ^ source_initial.keys() | {
            u for u in initial if initial[u] != source_initial.get(u)
        }
        if odd:
            log.append(f"{len(odd)} baseline copies differ from the Source before the run")
        for d in dests:
            d.initial = initial
        phase("copies")
        watcher.start()
        for d in dests:
            argv = [
                "-m", "rshub", "sync", "--dest", str(d.dest), "--hub", hub_pub, "--topic", TOPIC,
                "--no-progress", *d.args,
            ]  # fmt: skip
            if d.every is None:
                d.proc = spawn(d.dest.name, *argv)
                d.pids.add(d.proc.pid)
            else:
                pollers.append(asyncio.create_task(poll_every(d, argv, work, stop)))

        def metric(name: str) -> float:
            """The sum of the series whose line starts with ``name`` (all its labels)."""
            text = (http_get(f"http://127.0.0.1:{ports['hub']}/metrics") or b"").decode()
            return sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith(name) and not line.startswith("#")
            )

        await wait_until(
            "push Destinations to connect",
            lambda: (
                metric('rshub_subscriptions{state="active"}') >= 1
                and metric("rshub_stream_clients") >= 1
            ),
            60,
        )
        phase("destinations")
        for d in dests:
            if d.copies:
                log.append(f"{d.label}: {len(d.copies)} copy changes before the run")
            d.copies.clear()
            d.writes.clear()
        # The run: T seconds of changes, then G more seconds to see late copies.
        watched = [hub.pid, source.pid, proxy_proc.pid, os.getpid()] + [
            d.proc.pid for d in dests if d.proc and d.every is None
        ]
        cpu_before = {pid: cpu_seconds(pid) for pid in watched}
        runs_before = live_runs_cpu(dests)
        before = await proxy.snapshot()
        start = time.monotonic()
        go.touch()
        load = os.getloadavg()[0]
        await asyncio.sleep(plan.window)
        end = time.monotonic()
        after = await proxy.snapshot()
        log.append(
            f"machine load average (1 min) at start / end of the window: "
            f"{load:.1f} / {os.getloadavg()[0]:.1f} (the other processes of this machine count too)"
        )
        cpu_after = {pid: cpu_seconds(pid) for pid in watched}
        runs_after = live_runs_cpu(dests)
        await asyncio.sleep(plan.grace)
        observed_until = time.monotonic()
        if watcher.overflowed:
            log.append("inotify queue overflowed: copy states incomplete")
        names = {
            hub.pid: "hub",
            source.pid: "source",
            proxy_proc.pid: "proxy",
            os.getpid(): "bench",
        }
        names.update({d.proc.pid: d.label for d in dests if d.proc and d.every is None})
        log.append(
            "CPU s in the window: "
            + ", ".join(f"{names[p]} {cpu_after[p] - cpu_before[p]:.1f}" for p in watched)
            + "".join(
                f", {d.label} {runs_cpu(d, runs_before, runs_after):.1f}"
                for d in dests
                if d.every is not None
            )
        )
        phase("run")
        source_initial, source_changes = read_truth(truth)
        made = [c for c in source_changes if start <= c.at <= end]
        log.append(f"changes made in the window: {len(made)}")

        rows = []
        for d in dests:
            assert d.proc is not None
            avg = average_consistency(
                source_initial,
                source_changes,
                d.initial,
                d.copies,
                start=start,
                end=end,
                step=plan.step,
            )
            # Changes still out of sync at the end of the grace period are censored there.
            lat = latencies(
                source_initial,
                source_changes,
                d.initial,
                d.copies,
                since=start,
                until=end,
                observed_until=observed_until,
            )
            required = sum(size for at, size in d.writes if start <= at <= end)
            split = transferred(before, after, d)
            total = sum(split.values())
            log.append(
                f"{d.label}: bytes to/from the hub {split['hub']:,}, the Source "
                f"{split['src']:,}, the WebSub callback {split['cb']:,}; "
                f"{len([c for c in d.copies if start <= c.at <= end])} copy changes"
            )
            rows.append(
                Row(
                    d.label, avg, percentile(lat.all(), 0.5), lat.mean(),
                    percentile(lat.all(), 0.99), len(lat.values), lat.unsynced,
                    transfer_efficiency(required, total), required, total,
                    runs_cpu(d, runs_before, runs_after)
                    if d.every is not None
                    else cpu_after[d.proc.pid] - cpu_before[d.proc.pid],
                )
            )  # fmt: skip
        phase("metrics")
        for d in dests:
            if "-v" in d.args:  # push Destinations log their transport switches
                text = (work / f"{d.dest.name}.log").read_text(errors="replace")
                falls = text.count(" now poll (")
                if falls:
                    log.append(f"{d.label}: fell back to polling {falls} times")
        log.append("phases (s): " + ", ".join(phases))
        return rows
    finally:
        stop.set()
        for d in dests:
            if d.every is not None and d.proc is not None and d.proc.returncode is None:
                d.proc.terminate()
        if pollers:
            await asyncio.wait(pollers, timeout=30)
        if watcher is not None:
            watcher.close()
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in reversed(procs):
            try:
                await asyncio.to_thread(proc.wait, 15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        for aproc in aprocs:
            if aproc.returncode is None:
                aproc.kill()
                await aproc.wait()


def seconds(value: float) -> str:
    if math.isnan(value):
        return "—"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.1f} s"


def ratio(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.3f}"


def table(rows: list[Row]) -> str:
    out = [
        "| Destination | avg consistency | latency p50 | mean | p99 | changes synced / censored "
        "| transfer efficiency | required bytes | bytes transferred | CPU s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        at_least = "≥ " if r.censored else ""  # a censored latency is a lower bound
        p50, mean, p99 = (at_least + seconds(v) for v in (r.p50, r.mean, r.p99))
        out.append(
            f"| {r.label} | {r.consistency:.4f} | {p50} | {mean} | "
            f"{p99} | {r.measured} / {r.censored} | {ratio(r.efficiency)} | "
            f"{r.required:,} | {r.transferred:,} | {r.cpu:.1f} |"
        )
    return "\n".join(out)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short run (under 2 minutes)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory and logs")
    parser.add_argument(
        "--only", metavar="R:D", help="run one setup: R resources, a change every D s"
    )
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    if args.only:
        r, d = args.only.split(":")
        plan = dataclasses.replace(plan, setups=((int(r), float(d)),))
    import simulator  # type: ignore[import-untyped]

    print(
        f"# sync model: {'quick' if args.quick else 'full'} run, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"nproc {os.cpu_count()}, Python {sys.version.split()[0]}\n"
        f"Source: resync-simulator {simulator.__version__} (its Source and HTTP interface), "
        f"every change published to the hub by the publisher library. T = {plan.window:g} s, "
        f"grace {plan.grace:g} s, consistency sampled every {plan.step * 1000:.0f} ms.\n",
        flush=True,
    )
    work = Path(tempfile.mkdtemp(prefix="rshub-syncmodel-"))
    try:
        for resources, delay in plan.setups:
            log: list[str] = []
            began = time.monotonic()
            rows = await run_setup(plan, resources, delay, work / f"r{resources}-d{delay:g}", log)
            print(f"## R = {resources:,}, one change every {delay:g} s\n")
            print(table(rows))
            print()
            for line in log:
                print(f"- {line}")
            print(f"- setup took {time.monotonic() - began:.0f} s\n", flush=True)
    finally:
        if args.keep:
            print(f"work directory: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
