"""Start-up of ``rshub serve`` (issue 22: restart → serving ≤ 0.3 s), beside same-run baselines.

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

Run: ``.venv/bin/python bench/startup.py --repeat 9``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peer_nchan import HOST, ROOT, Redis, Rshub, compile_hub, cpu_of, http_conn, serving_probe

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
    """``rshub serve`` from a given checkout (``None``: this one)."""

    def __init__(self, workdir: Path, redis: Redis, src: str | None) -> None:
        super().__init__(workdir, redis)
        self.src = src

    def command(self) -> tuple[list[str], dict[str, str]]:
        argv, env = super().command()
        return argv, {**env, **({"PYTHONPATH": self.src} if self.src else {})}


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
    args = parser.parse_args()
    if args.hub_src:
        args.hub_src = str(Path(args.hub_src).resolve())
    if not args.no_compile:
        for checkout in (ROOT, *([Path(args.hub_src)] if args.hub_src else [])):
            compile_hub(checkout)
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
