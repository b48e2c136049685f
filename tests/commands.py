"""``python -m rshub ...`` as a real child process, its output collected as it comes."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

from tests.support import TIME_SCALE


class Command:
    """``python -m rshub ARGV`` with its stderr collected as it comes."""

    def __init__(self, *argv: str, env: dict[str, str] | None = None) -> None:
        self.argv = argv
        #: Variables set for the child on top of the test process's environment.
        self.env = env
        self.err = b""
        self.out = b""
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> Command:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "rshub",
            *self.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=None if self.env is None else {**os.environ, **self.env},
        )
        self._reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.proc is not None
        assert self.proc.stderr is not None and self.proc.stdout is not None

        async def err(stream: asyncio.StreamReader) -> None:
            while chunk := await stream.read(4096):
                self.err += chunk

        async def out(stream: asyncio.StreamReader) -> None:
            while chunk := await stream.read(4096):
                self.out += chunk

        await asyncio.gather(err(self.proc.stderr), out(self.proc.stdout))

    @property
    def lines(self) -> list[str]:
        """Complete lines printed on stdout so far."""
        return self.out.decode(errors="replace").splitlines()[: self.out.count(b"\n")]

    async def wait(self, timeout: float = 20.0) -> int:
        """The exit code (killed, and the test failed, after ``timeout`` seconds)."""
        assert self.proc is not None
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout * TIME_SCALE)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise AssertionError(f"still running after {timeout}s: {self.stderr}") from None
        assert self._reader is not None
        await asyncio.wait_for(self._reader, 5)
        return code

    async def stop(self) -> None:
        """Kill it if it still runs (test clean-up)."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()

    @property
    def stderr(self) -> str:
        return self.err.decode(errors="replace")

    async def interrupt(self) -> tuple[float, int]:
        """Send SIGINT; return the seconds until exit and the exit code."""
        assert self.proc is not None and self.proc.returncode is None, self.stderr
        self.proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        try:
            code = await asyncio.wait_for(self.proc.wait(), 15)
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise AssertionError(f"still running 15 s after SIGINT: {self.stderr}") from None
        elapsed = time.monotonic() - sent
        assert self._reader is not None
        await asyncio.wait_for(self._reader, 5)
        return elapsed, code
