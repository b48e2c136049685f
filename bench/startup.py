"""Start-up of ``rshub serve`` (target: restart → serving ≤ 0.3 s), beside same-run baselines.

One ``redis-server`` (AOF, as ``bench/peer_nchan.py``) stays up. Each round runs, in an order
that rotates from round to round:

* ``python -c pass`` and ``python -c 'import aiohttp'``: what any Python server pays;
* ``import rshub.cli, hub.serve.cli, hub.web.app``: the modules ``rshub serve`` imports
  before it listens (the app as it imports it: see ``SERVE_IMPORTS``);
* ``rshub serve --redis-url …`` (SIGKILLed after): exec → first ``GET /healthz`` 200, and
  exec → a fresh SSE subscriber received a publish made after it subscribed (the
  ``restart`` figure of ``bench/peer_nchan.py``, whose probe this uses).

Both checkouts are byte-compiled first, as ``bench/peer_nchan.py`` does (``--no-compile``:
not, so that with ``PYTHONDONTWRITEBYTECODE`` set each start compiles them again).

``--hub-src DIR`` adds the same rows for another checkout (e.g. a worktree of main), in the
same rounds. Prints medians (and min/max) in milliseconds of wall time and of the child's
CPU time (user + system; the hub's at 10 ms resolution), the steadier figure on a busy machine.

``--profile DIR`` runs each start of this checkout under ``py-spy record`` (1 kHz, raw,
non-blocking) from exec until its probe was served (the hub alone is then SIGKILLed, so
py-spy writes what it sampled up to there), and writes ``DIR/startup-profile.md``: the top 20
frames by own time, and the samples by the package whose module body was running (the
imports) against the rest. The profiler slows the start; read its shares, not its times.

Run: ``.venv/bin/python bench/startup.py --repeat 9``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyspy_raw
from peer_nchan import (
    HOST,
    ROOT,
    Redis,
    Rshub,
    compile_hub,
    cpu_of,
    http_conn,
    serving_probe,
    tree,
)

#: As ``rshub serve`` imports them: the app inside ``client_trust.deferred()`` where the
#: checkout has it (aiohttp's client contexts without their CA files until the hub serves).
SERVE_IMPORTS = """
import contextlib, rshub.cli, hub.serve.cli
try:
    from hub.live.client_trust import deferred
except ImportError:
    deferred = contextlib.nullcontext
with deferred():
    import hub.web.app
"""


class Hub(Rshub):
    """``rshub serve`` from a given checkout (``None``: this one), under ``py-spy`` when
    ``profile`` names its output file."""

    def __init__(
        self, workdir: Path, redis: Redis, src: str | None, profile: Path | None = None
    ) -> None:
        super().__init__(workdir, redis)
        self.src = src
        self.profile = profile

    def command(self) -> tuple[list[str], dict[str, str]]:
        argv, env = super().command()
        if self.profile is not None:
            pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            argv = [
                pyspy, "record", "--format", "raw", "--rate", "1000", "--nonblocking",
                "--full-filenames", "--output", str(self.profile), "--", *argv,
            ]  # fmt: skip
        return argv, {**env, **({"PYTHONPATH": self.src} if self.src else {})}

    def end_profile(self) -> None:
        """SIGKILL the hub alone (py-spy's child): py-spy then writes its samples."""
        hub = [p for p in tree(self.pid) if p != self.pid]
        if hub:
            os.kill(hub[0], signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(30)


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run_python(code: str, src: str | None) -> tuple[float, float]:
    """Wall and CPU seconds of ``python -c code``."""
    env = {**os.environ, **({"PYTHONPATH": src} if src else {})}
    cpu = children_cpu()
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return time.perf_counter() - began, children_cpu() - cpu


async def healthz(port: int, began: float) -> float:
    request = f"GET /healthz HTTP/1.1\r\nHost: {HOST}:{port}\r\n\r\n".encode()
    while time.perf_counter() - began < 15:
        try:
            conn = await http_conn(port)
        except OSError:
            await asyncio.sleep(0.002)
            continue
        try:
            if await conn.request(request) == 200:
                return time.perf_counter() - began
        except OSError:
            pass
        finally:
            conn.close()
        await asyncio.sleep(0.002)
    raise RuntimeError("no /healthz 200 within 15 s")


async def serve_once(workdir: Path, redis: Redis, src: str | None, n: int) -> list[float]:
    """exec → /healthz 200 and exec → event, wall; the hub's CPU seconds at each."""
    hub = Hub(workdir, redis, src)
    began = time.perf_counter()
    hub.start()
    try:
        up = await healthz(hub.port, began)
        up_cpu = sum(cpu_of([hub.pid]).values())
        served = await serving_probe(hub, f"startup{n}", 15, began)
        return [up, served, up_cpu, sum(cpu_of([hub.pid]).values())]
    finally:
        hub.kill()


async def profile_once(workdir: Path, redis: Redis, out: Path, n: int) -> None:
    """One start under py-spy, sampled until its probe was served (see ``--profile``)."""
    hub = Hub(workdir, redis, None, out)
    began = time.perf_counter()
    hub.start()
    try:
        await serving_probe(hub, f"profile{n}", 60, began)
        hub.end_profile()
    finally:
        hub.kill()


def write_profile(directory: Path) -> Path:
    """Top 20 frames by own samples over every ``start-*.txt``, and the samples by the
    package whose module body (an import) was innermost."""
    by_package: collections.Counter[str] = collections.Counter()
    starts = sorted(directory.glob("start-*.txt"))
    for raw in starts:
        for frames, count in pyspy_raw.samples(raw):
            by_package[_where(frames)] += count
    own, total = pyspy_raw.top_own(starts)
    lines = [
        f"# `rshub serve` from exec until serving: py-spy over {len(starts)} starts",
        "",
        f"{total} samples at 1 kHz ({total / max(len(starts), 1):.0f} per start, under the "
        "profiler); own = samples whose innermost frame is this function.",
        "",
        "| # | frame | samples | % |",
        "|---:|---|---:|---:|",
    ]
    lines += [
        f"| {i} | `{frame}` | {c} | {100 * c / total:.1f} |" for i, (frame, c) in enumerate(own, 1)
    ]
    lines += ["", "| where | samples | % |", "|---|---:|---:|"]
    lines += [f"| {k} | {c} | {100 * c / total:.1f} |" for k, c in by_package.most_common()]
    out = directory / "startup-profile.md"
    out.write_text("\n".join(lines) + "\n")
    return out


def _where(frames: list[str]) -> str:
    """What a sample's stack was doing: running a module body of some package (an import),
    the import system finding, reading and unmarshalling a module, or neither."""
    body = None
    for i in range(1, len(frames)):
        if frames[i].startswith("<module> (") and "_call_with_frames_removed" in frames[i - 1]:
            body = i
    if body is None:
        importing = any("_find_and_load" in f for f in frames)
        return "the import system" if importing else "not importing (set-up, serving)"
    if any("<frozen importlib" in f for f in frames[body + 1 :]):
        return "the import system (finding, reading, unmarshalling a module)"
    return "module bodies of " + _package(frames[body][len("<module> (") :].split(":")[0])


def _package(path: str) -> str:
    """The top-level package (or the standard library) a module's file belongs to."""
    parts = Path(path).parts
    if "site-packages" in parts:
        return parts[parts.index("site-packages") + 1].removesuffix(".py")
    for own in ("hub", "resourcesync", "rshub", "rsclient"):
        if own in parts:
            return own
    return "the standard library"


async def main_async(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="rshub-startup-"))
    redis = Redis(base / "redis")
    sources: dict[str, str | None] = {"this": None}
    if args.hub_src:
        sources["other"] = args.hub_src
    got: dict[str, list[tuple[float, float]]] = {}

    def add(name: str, wall_cpu: tuple[float, float]) -> None:
        got.setdefault(name, []).append(wall_cpu)

    try:
        if args.profile:
            directory = Path(args.profile)
            for r in range(args.repeat):
                await profile_once(base, redis, directory / f"start-{r}.txt", r)
            print(f"profile: {write_profile(directory)}")
            return
        for r in range(args.repeat):
            jobs: list[tuple[str, str | None]] = [("pass", None), ("aiohttp", None)]
            jobs += [(f"{name}:{kind}", src) for name, src in sources.items() for kind in
                     ("imports", "serve")]  # fmt: skip
            jobs = jobs[r % len(jobs) :] + jobs[: r % len(jobs)]
            for job, src in jobs:
                if job in ("pass", "aiohttp"):
                    code = "pass" if job == "pass" else "import aiohttp"
                    add(f"python -c '{code}'", run_python(code, None))
                elif job.endswith(":imports"):
                    add(job, run_python(SERVE_IMPORTS, src))
                else:
                    up, served, up_cpu, served_cpu = await serve_once(base, redis, src, r)
                    add(f"{job} exec→healthz", (up, up_cpu))
                    add(f"{job} exec→event", (served, served_cpu))
    finally:
        redis.stop()
        shutil.rmtree(base, ignore_errors=True)
    print(f"# bench/startup.py {' '.join(sys.argv[1:])}; load {os.getloadavg()[0]:.1f}")
    if args.hub_src:
        print(f"# other = {args.hub_src}")
    print(f"{'':32} {'wall ms':>8} {'min':>5} {'max':>5} {'CPU ms':>7} {'min':>5} {'max':>5}")
    for name, values in got.items():
        wall = [w * 1000 for w, _ in values]
        cpu = [c * 1000 for _, c in values]
        print(
            f"{name:32} {statistics.median(wall):8.0f} {min(wall):5.0f} {max(wall):5.0f} "
            f"{statistics.median(cpu):7.0f} {min(cpu):5.0f} {max(cpu):5.0f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--hub-src", metavar="DIR", help="also start rshub from this checkout")
    parser.add_argument("--no-compile", action="store_true", help="do not byte-compile")
    parser.add_argument("--profile", metavar="DIR", help="py-spy --repeat starts into DIR")
    args = parser.parse_args()
    if args.hub_src:
        args.hub_src = str(Path(args.hub_src).resolve())
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    if not args.no_compile:
        for checkout in (ROOT, *([Path(args.hub_src)] if args.hub_src else [])):
            compile_hub(checkout)
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
