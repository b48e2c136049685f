"""``rshub serve --workers N``: N hub processes on one port and one Redis, kept running.

The parent starts the embedded Redis once (unless ``--redis-url`` names one), supervises
it, and runs N copies of ``rshub serve --workers 1`` on the same port with
``SO_REUSEPORT``, so the kernel spreads connections across them. Every copy serves every
route; WebSub deliveries are spread across them by :mod:`hub.live.ownership`. A copy that dies
is restarted (with back-off if it keeps dying), one that stopped cleanly (SIGTERM to that
worker alone: a rolling restart) at once; SIGTERM or SIGINT to the parent stops them all, then
the Redis. Children get ``PR_SET_PDEATHSIG``, so they never outlive the parent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Mapping

from hub.core import metrics
from hub.core.tasks import Tasks
from hub.store.embedded_redis import EmbeddedRedis, die_with_parent
from rsclient.backoff import Backoff, Retrier

log = logging.getLogger("rshub")

#: A worker that ran this long before dying restarts at once; sooner, with back-off.
_STABLE_SECONDS = 10.0
_BACKOFF = Backoff(base=0.2, cap=10.0, jitter=0.0)
_STOP_SECONDS = 10.0


def worker_count(value: str | int) -> int:
    """``auto`` (one per core) or a whole number of at least 1."""
    if value == "auto":
        return os.cpu_count() or 1
    count = int(value)
    if count < 1:
        raise ValueError("workers must be at least 1 (or auto)")
    return count


class WorkerPool:
    def __init__(
        self,
        count: int,
        argv: list[str],
        redis_url: str,
        embedded: EmbeddedRedis | None,
        *,
        secrets: Mapping[str, str] | None = None,
    ) -> None:
        self.count = count
        self.argv = argv
        #: ``RSHUB_*`` variables kept off the command line (tokens).
        self.secrets = dict(secrets or {})
        self.redis_url = redis_url
        self.embedded = embedded
        self.procs: dict[int, asyncio.subprocess.Process] = {}
        self.restarts = 0
        self._stopping = asyncio.Event()

    def _command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "rshub",
            "serve",
            *self.argv,
            "--workers",
            "1",
        ]

    async def _spawn(self, slot: int) -> asyncio.subprocess.Process:
        # The Redis URL (it may carry a password) in the environment: any local user can
        # read a command line (/proc/PID/cmdline), only the owner an environment.
        env = {
            **os.environ,
            **self.secrets,
            "RSHUB_REUSE_PORT": "true",
            "RSHUB_WORKER_SLOT": str(slot),
            "RSHUB_REDIS_URL": self.redis_url,
        }
        proc = await asyncio.create_subprocess_exec(
            *self._command(), env=env, preexec_fn=die_with_parent()
        )
        self.procs[slot] = proc
        log.info("worker %d started (pid %d)", slot, proc.pid)
        return proc

    async def _keep(self, slot: int) -> None:
        """Run worker ``slot``; restart it whenever it dies, until stopping."""

        async def pause(delay: float) -> None:  # cut short by a stop
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)

        retry = Retrier(_BACKOFF, pause=pause)
        async for _ in retry:
            if self._stopping.is_set():
                return
            started = time.monotonic()
            proc = await self._spawn(slot)
            code = await proc.wait()
            metrics.process_exited(proc.pid)
            if self._stopping.is_set():
                return
            self.restarts += 1
            if code == 0:
                # A clean exit: an operator's SIGTERM to this worker alone (a rolling
                # restart, docs/scaling.md), not a crash. Its replacement starts at once.
                log.info("worker %d (pid %d) stopped; starting a new one", slot, proc.pid)
                retry.succeeded()
                continue
            log.warning("worker %d (pid %d) exited with %s; restarting", slot, proc.pid, code)
            if time.monotonic() - started >= _STABLE_SECONDS:
                retry.succeeded()  # restart at once, and back off from the start next time
            else:
                retry.failed()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        tasks = Tasks("workers")
        if self.embedded is not None:  # started first, stopped last: workers use it
            tasks.spawn("redis-supervisor", self.embedded.supervise(self._stopping))
        keepers = tasks.group("keepers", peers=True)
        for slot in range(self.count):
            keepers.spawn(f"worker-{slot}", self._keep(slot))
        await self._stopping.wait()
        log.info("stopping %d workers", len(self.procs))
        await self._stop_all()
        await tasks.stop()
        return 0

    async def _stop_all(self) -> None:
        live = [p for p in self.procs.values() if p.returncode is None]
        for proc in live:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.gather(*(p.wait() for p in live)), _STOP_SECONDS)
        except TimeoutError:
            for proc in live:
                if proc.returncode is None:
                    log.warning("worker pid %d did not stop in time; killing it", proc.pid)
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
