#!/usr/bin/env python3
"""rshub beside Nchan: the same clients, payload and Redis persistence against both.

Nchan (the nginx pub/sub module, Redis-backed) is what an operator would otherwise pick for
HTTP publish → WebSocket/SSE fan-out with resume. This bench starts, in its own temp dir
and all on 127.0.0.1: a ``redis-server`` with AOF (``appendfsync everysec``) for each
server, nginx with the Nchan module in the foreground on a generated config (Redis storage
through an ``nchan_redis_server`` upstream, a message buffer so resume works), and
``rshub serve`` on ``--redis-url``. Nginx and the module are Debian's packages (``nginx``,
``libnginx-mod-nchan``): when they are missing, the bench installs them with ``apt-get`` if it
runs as root (as CI does), with services kept from starting (the bench runs its own nginx,
never the system's), and otherwise says what to install. It does byte-compile the checkout
rshub runs from (``compileall``, as installing the wheel does): with
``PYTHONDONTWRITEBYTECODE`` set, a source tree is compiled again at every start, ~115 ms
of CPU of a restart here.

Both are driven by the same clients in this process (raw asyncio sockets, llhttp via
``httptools`` for HTTP, a minimal WebSocket framer) with the same one-change ResourceSync
``changelist-notification`` (~430 bytes; each carries its ``perf_counter_ns()`` send stamp in
its ``loc``): Nchan gets those bytes at its publisher location, rshub as a Change List
fragment ``POST /topics/{name}``. Each run alternates which server goes first. Per server:

* ``mixed``: 100 SSE + 100 WebSocket subscribers (subscribed in turn), 100 publishes/s:
  publish→receive p50/p99 per transport, publish round trip, server and Redis CPU per
  1,000 deliveries;
* ``sse``, ``ws``: each transport alone (100 subscribers);
* ``tput``: 8 publishers flat out, publishes/s accepted (2xx);
* ``flood``: 100 WebSocket subscribers while 8 publishers publish flat out for
  ``--tput-seconds`` (the issue's own CPU figure): server CPU from the first publish until
  every accepted publish reached every subscriber, per 1,000 deliveries; with 2 processes
  too, on ``mixed2``'s server;
* ``idle``: 5,000 idle SSE connections: time until all are accepted (256 in flight) and
  server RSS per connection;
* ``restart``: after ``WARM_UP_SECONDS``, SIGKILL the server (its whole process group),
  start it again (Redis keeps running): time until a fresh subscriber received a publish
  made after it subscribed;
* ``mixed2``: ``mixed``'s CPU per 1,000 deliveries with 2 server processes
  (``rshub serve --workers 2``, nginx ``worker_processes 2``).

After each start, both servers get ``WARM_UP_SECONDS`` (2 s) before a phase measures, so
that start-up work (rshub defers some to a second after it serves) is not counted per
delivery. Server CPU is read from ``/proc/PID/stat`` of the server's whole process tree
(nginx master and workers; rshub and any children); Redis is counted separately. So are
the server's context switches per publish (``/proc/PID/task/*/status``): on this 2-core
machine the server, its Redis and the clients share the cores, and an involuntary switch is
the server preempted mid-burst by a process it just woke (a subscriber, Redis), whose
caches then come back cold.
``--profile DIR`` also records rshub under ``py-spy`` in every 1-process phase, and one of
the two workers in ``flood`` with 2 processes, and writes top-20 tables of own time (the
profiler's CPU perturbs that run's figures).

Run: ``.venv/bin/python bench/peer_nchan.py --repeat 5`` (about 10 minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import compileall
import contextlib
import ctypes
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httptools
import pyspy_raw

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.render import CODES, append_record, commit_of, this_machine, utc_now  # noqa: E402
from hub.store.embedded_redis import find_redis_server  # noqa: E402

HOST = "127.0.0.1"
STAMP = re.compile(rb"\?t=(\d+)")
CLK_TCK = os.sysconf("SC_CLK_TCK")
LASTMOD = "2024-01-01T00:00:00Z"
PHASES = ("mixed", "sse", "ws", "tput", "flood", "idle", "restart", "mixed2")
NGINX_MODULE = "/usr/lib/nginx/modules/ngx_nchan_module.so"
#: ``PYTHONPATH`` for ``rshub serve`` when ``--hub-src`` names another checkout.
HUB_SRC: dict[str, str] = {}


def notification(i: int, t_ns: int) -> bytes:
    """The one-change ``changelist-notification`` of ``bench/hub.py``, stamped ``t_ns``."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:rs="http://www.openarchives.org/rs/terms/">'
        '<rs:md capability="changelist-notification"/>'
        f"<url><loc>http://bench/x/{i}?t={t_ns}</loc><lastmod>{LASTMOD}</lastmod>"
        f'<rs:md change="updated" hash="md5:{i % 65536:032x}" length="{1000 + i % 1000}" '
        f'type="text/html"/></url></urlset>'
    ).encode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def compile_hub(checkout: Path) -> None:
    """Byte-compile the packages ``rshub serve`` imports from ``checkout``, as installing
    the wheel does (``__pycache__``, which git ignores)."""
    for package in ("hub", "resourcesync", "rshub", "rsclient", "publisher", "subscriber"):
        if not compileall.compile_dir(checkout / package, quiet=1):
            raise RuntimeError(f"cannot byte-compile {checkout / package}")


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# -- processes ----------------------------------------------------------------------------


def _stat(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def tree(root: int) -> list[int]:
    """``root`` and every live descendant."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat(int(name))
            if fields and fields[0] != b"Z":
                children[int(fields[1])].append(int(name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def cpu_of(pids: Iterable[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        fields = _stat(pid)
        if fields:
            out[pid] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


def cpu_delta(before: dict[int, float], after: dict[int, float]) -> float:
    return sum(after[p] - before[p] for p in before if p in after)


def rss_kib(pids: Iterable[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def switches_of(pids: Iterable[int]) -> tuple[int, int]:
    """Voluntary and involuntary context switches of every thread of ``pids`` so far."""
    voluntary = involuntary = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    for line in f:
                        if line.startswith("voluntary_ctxt_switches:"):
                            voluntary += int(line.split()[1])
                        elif line.startswith("nonvoluntary_ctxt_switches:"):
                            involuntary += int(line.split()[1])
            except OSError:
                pass
    return voluntary, involuntary


def client_cpu() -> float:
    t = os.times()
    return t.user + t.system


class Redis:
    """A plain redis-server with AOF, for one server under test."""

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                find_redis_server(),
                "--port", str(self.port), "--bind", HOST, "--dir", str(workdir),
                "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
                "--daemonize", "no", "--logfile", str(workdir / "redis.log"),
            ],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection((HOST, self.port), 1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return
            time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Server:
    """A server under test, started in its own session so SIGKILL reaches every process."""

    name = ""

    def __init__(self, workdir: Path, redis: Redis, workers: int = 1) -> None:
        self.workdir = workdir
        self.redis = redis
        self.workers = workers
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def pub_path(self, topic: str) -> str:
        raise NotImplementedError

    def sse_path(self, topic: str) -> str:
        raise NotImplementedError

    def ws_path(self, topic: str) -> str:
        raise NotImplementedError

    def start(self) -> None:
        argv, env = self.command()
        log = open(self.workdir / f"{self.name}.log", "ab")
        self.proc = subprocess.Popen(
            argv,
            env={**os.environ, **env},
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        log.close()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def pids(self) -> list[int]:
        return tree(self.pid)

    def _signal_all(self, sig: int, wait: float) -> bool:
        assert self.proc is not None
        members = self.pids()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            return False
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            alive = [p for p in members if (st := _stat(p)) and st[0] != b"Z"]
            if not alive:
                return True
            time.sleep(0.005)
        return False

    def kill(self) -> None:
        self._signal_all(signal.SIGKILL, 10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        if not self._signal_all(signal.SIGTERM, 10):
            self.kill()

    def publish_request(self, topic: str, body: bytes) -> bytes:
        return (
            f"POST {self.pub_path(topic)} HTTP/1.1\r\nHost: {HOST}:{self.port}\r\n"
            f"Content-Type: application/xml\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body


class Rshub(Server):
    name = "rshub"

    def command(self) -> tuple[list[str], dict[str, str]]:
        return [
            sys.executable, "-m", "rshub", "serve", "--host", HOST, "--port", str(self.port),
            "--redis-url", f"redis://{HOST}:{self.redis.port}/0", "--log-level", "WARNING",
            "--workers", str(self.workers),
        ], {"RSHUB_MAX_CONNECTIONS": "20000", **HUB_SRC}  # fmt: skip

    def pub_path(self, topic: str) -> str:
        return f"/topics/{topic}"

    def sse_path(self, topic: str) -> str:
        return f"/topics/{topic}/events"

    def ws_path(self, topic: str) -> str:
        return f"/topics/{topic}/ws"


NGINX_CONF = """\
load_module {module};
daemon off;
master_process on;
user root;
worker_processes {workers};
worker_rlimit_nofile {nofile};
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 20000; }}
http {{
  access_log off;
  # nginx closes a keep-alive connection after 1,000 requests by default (rshub does not):
  # the throughput phase's 8 publishers, which do not reconnect, then all stopped within
  # its warm-up and Nchan was reported at 0 publishes/s.
  keepalive_requests 100000000;
  client_body_temp_path {dir}/body;
  upstream rsredis {{ nchan_redis_server redis://{host}:{redis_port}; }}
  server {{
    listen {host}:{port} backlog=1024;
    location ~ ^/pub/(\\w+)$ {{
      nchan_publisher;
      nchan_channel_id $1;
      nchan_redis_pass rsredis;
      nchan_message_buffer_length 10000;
      nchan_message_timeout 1h;
    }}
    location ~ ^/sub/(\\w+)$ {{
      nchan_subscriber websocket eventsource;
      nchan_channel_id $1;
      nchan_redis_pass rsredis;
    }}
  }}
}}
"""


class Nchan(Server):
    name = "Nchan"

    def command(self) -> tuple[list[str], dict[str, str]]:
        conf = self.workdir / f"nginx-{self.workers}.conf"
        conf.write_text(
            NGINX_CONF.format(
                module=NGINX_MODULE,
                workers=self.workers,
                nofile=resource.getrlimit(resource.RLIMIT_NOFILE)[1],
                dir=self.workdir,
                host=HOST,
                port=self.port,
                redis_port=self.redis.port,
            )
        )
        errlog = str(self.workdir / "error.log")
        return ["nginx", "-p", str(self.workdir), "-c", str(conf), "-e", errlog], {}

    def pub_path(self, topic: str) -> str:
        return f"/pub/{topic}"

    def sse_path(self, topic: str) -> str:
        return f"/sub/{topic}"

    def ws_path(self, topic: str) -> str:
        return f"/sub/{topic}"


# -- clients ------------------------------------------------------------------------------


class HttpConn(asyncio.Protocol):
    """A keep-alive HTTP/1.1 connection with one request in flight."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future[int] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(exc)

    def on_message_complete(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(self.parser.get_status_code())

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._fail(exc or ConnectionResetError("closed"))

    def _fail(self, exc: BaseException) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    async def request(self, data: bytes) -> int:
        if self.transport is None:
            raise ConnectionResetError("closed")
        self.waiter = waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return await waiter

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def http_conn(port: int) -> HttpConn:
    _, proto = await asyncio.get_running_loop().create_connection(HttpConn, HOST, port)
    return proto


class Subscriber(asyncio.Protocol):
    """Counts the stamps it receives and records each one's latency into ``rec``."""

    def __init__(self, request: bytes, rec: list[int] | None) -> None:
        self.request = request
        self.rec = rec
        self.count = 0
        self.ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.closed = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        transport.write(self.request)  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(exc or ConnectionResetError("closed before ready"))
        if not self.closed.done():
            self.closed.set_result(None)

    def _stamps(self, data: bytes | bytearray) -> None:
        stamps = STAMP.findall(data)
        if stamps:
            now = time.perf_counter_ns()
            self.count += len(stamps)
            rec = self.rec
            if rec is not None:
                rec.extend(now - int(s) for s in stamps)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class SseClient(Subscriber):
    def __init__(self, port: int, path: str, rec: list[int] | None) -> None:
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nAccept: text/event-stream\r\n\r\n"
        ).encode()
        super().__init__(request, rec)
        self.parser = httptools.HttpResponseParser(self)
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if not self.ready.done():
                self.ready.set_exception(exc)
            self.close()

    def on_headers_complete(self) -> None:
        if not self.ready.done():
            self.ready.set_result(self.parser.get_status_code())

    def on_body(self, body: bytes) -> None:
        buf = self.buf + body if self.buf else body
        cut = buf.rfind(b"\n\n")
        if cut < 0:
            self.buf = buf
            return
        self.buf = buf[cut + 2 :]
        self._stamps(buf[:cut])


class WsClient(Subscriber):
    def __init__(self, port: int, path: str, rec: list[int] | None) -> None:
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {HOST}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
        super().__init__(request, rec)
        self.buf = bytearray()
        self.upgraded = False

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        if not self.upgraded:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            status = int(buf[9:12])
            del buf[: end + 4]
            self.upgraded = status == 101
            if not self.ready.done():
                self.ready.set_result(status)
            if not self.upgraded:
                self.close()
                return
        while len(buf) >= 2:
            b1 = buf[1]
            length, offset = b1 & 0x7F, 2
            if length == 126:
                if len(buf) < 4:
                    return
                length, offset = int.from_bytes(buf[2:4], "big"), 4
            elif length == 127:
                if len(buf) < 10:
                    return
                length, offset = int.from_bytes(buf[2:10], "big"), 10
            if b1 & 0x80:
                offset += 4  # a masked server frame: not expected
            if len(buf) < offset + length:
                return
            opcode = buf[0] & 0x0F
            payload = bytes(buf[offset : offset + length])
            del buf[: offset + length]
            if opcode == 0x9 and self.transport is not None:  # ping: pong, zero mask
                self.transport.write(bytes([0x8A, 0x80 | len(payload)]) + b"\0\0\0\0" + payload)
            elif opcode == 0x8:
                self.close()
                return
            elif opcode in (0x0, 0x1, 0x2):
                self._stamps(payload)


async def subscribe(
    kind: str, server: Server, topic: str, rec: list[int] | None = None
) -> Subscriber:
    cls = SseClient if kind == "sse" else WsClient
    path = server.sse_path(topic) if kind == "sse" else server.ws_path(topic)
    proto = cls(server.port, path, rec)
    loop = asyncio.get_running_loop()
    await loop.create_connection(lambda: proto, HOST, server.port)
    status = await asyncio.wait_for(proto.ready, 30)
    if status not in (200, 101):
        proto.close()
        raise ConnectionError(f"{server.name} {kind} subscribe answered {status}")
    return proto


async def subscribe_many(
    kind: str, server: Server, topic: str, n: int, rec: list[int] | None, in_flight: int = 256
) -> list[Subscriber]:
    gate = asyncio.Semaphore(in_flight)

    async def one() -> Subscriber:
        async with gate:
            return await subscribe(kind, server, topic, rec)

    return list(await asyncio.gather(*(one() for _ in range(n))))


async def subscribe_alternately(
    server: Server, topic: str, n_sse: int, sse_rec: list[int], n_ws: int, ws_rec: list[int]
) -> list[Subscriber]:
    """``n_sse`` SSE and ``n_ws`` WebSocket subscribers, one of each in turn, one at a time.

    A server writes a publish to its subscribers in some order of their subscriptions, and
    the per-transport p50 follows it: Nchan writes its newest subscribers first (all SSE
    then all WS subscribed gave Nchan WS 1.5-2.0 ms, SSE 3.2-3.9; WS first, the reverse),
    rshub its oldest. In turn, neither transport is first on either server."""
    pairs = min(n_sse, n_ws)
    order = ["sse", "ws"] * pairs + ["sse"] * (n_sse - pairs) + ["ws"] * (n_ws - pairs)
    subs: list[Subscriber] = []
    for kind in order:
        subs.append(await subscribe(kind, server, topic, sse_rec if kind == "sse" else ws_rec))
    return subs


async def wait_until(cond: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True


# -- phases -------------------------------------------------------------------------------


def pct(values: list[int], q: float) -> float:
    """The ``q`` quantile of nanosecond ``values``, in ms."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6


@dataclass
class Figures:
    values: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)


class Profiler:
    """``py-spy record --format raw`` of one process for one phase (``--profile``)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, pid: int, name: str) -> None:
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.proc = subprocess.Popen(
            [pyspy, "record", "--pid", str(pid), "--format", "raw", "--rate", "250",
             "--nonblocking", "--output", str(self.directory / f"{name}.txt")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(0.5)  # attached

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(30)
            self.proc = None


async def publish_paced(
    server: Server, topic: str, rate: float, seconds: float, conns: int = 4
) -> tuple[list[int], int]:
    """``rate`` publishes/s for ``seconds`` over ``conns`` keep-alive connections: the round
    trips (ns) and how many were not 2xx."""
    free: asyncio.Queue[HttpConn] = asyncio.Queue()
    for _ in range(conns):
        free.put_nowait(await http_conn(server.port))
    rtts: list[int] = []
    failed = 0

    async def one(i: int) -> None:
        nonlocal failed
        conn = await free.get()
        t = time.perf_counter_ns()
        try:
            status = await conn.request(server.publish_request(topic, notification(i, t)))
        except (ConnectionError, httptools.HttpParserError):
            failed += 1
            conn = await http_conn(server.port)
        else:
            rtts.append(time.perf_counter_ns() - t)
            if not 200 <= status < 300:
                failed += 1
        free.put_nowait(conn)

    total = int(rate * seconds)
    start = time.perf_counter()
    tasks = []
    for i in range(total):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(i)))
    await asyncio.gather(*tasks)
    while not free.empty():
        free.get_nowait().close()
    return rtts, failed


async def warm_up(server: Server, topic: str, subs: list[Subscriber]) -> None:
    """One publish that every subscriber must receive before a phase measures."""
    conn = await http_conn(server.port)
    await conn.request(server.publish_request(topic, notification(0, 0)))
    conn.close()
    if not await wait_until(lambda: all(s.count >= 1 for s in subs), 15):
        raise RuntimeError(f"{server.name}: the warm-up publish did not reach every client")


async def stream_phase(
    server: Server, redis: Redis, topic: str, n_sse: int, n_ws: int, rate: float, seconds: float
) -> dict[str, object]:
    """Subscribers on ``topic``; one warm-up publish all receive; then paced publishes."""
    sse_rec: list[int] = []
    ws_rec: list[int] = []
    subs = await subscribe_alternately(server, topic, n_sse, sse_rec, n_ws, ws_rec)
    try:
        await warm_up(server, topic, subs)
        sse_rec.clear()
        ws_rec.clear()
        pids = server.pids()
        s0, r0, c0 = cpu_of(pids), cpu_of([redis.pid]), client_cpu()
        x0 = switches_of(pids)
        w0 = time.perf_counter()
        rtts, failed = await publish_paced(server, topic, rate, seconds)
        expected = (len(rtts) - failed) * len(subs)
        complete = await wait_until(lambda: len(sse_rec) + len(ws_rec) >= expected, 15)
        wall = time.perf_counter() - w0
        s1, r1, c1 = cpu_of(pids), cpu_of([redis.pid]), client_cpu()
        x1 = switches_of(pids)
    finally:
        for sub in subs:
            sub.close()
    delivered = len(sse_rec) + len(ws_rec)
    return {
        "sse": sse_rec,
        "ws": ws_rec,
        "rtt": rtts,
        "failed": failed,
        "complete": complete and failed == 0,
        "delivered": delivered,
        "expected": expected,
        "server_cpu": cpu_delta(s0, s1),
        "redis_cpu": cpu_delta(r0, r1),
        "client_cpu": c1 - c0,
        "switches": ((x1[0] - x0[0]) / max(1, len(rtts)), (x1[1] - x0[1]) / max(1, len(rtts))),
        "wall": wall,
    }


async def throughput_phase(
    server: Server, redis: Redis, topic: str, seconds: float, publishers: int = 8
) -> dict[str, float]:
    conns = [await http_conn(server.port) for _ in range(publishers)]
    stop = False
    ok = bad = 0
    body = server.publish_request(topic, notification(1, 1))

    async def run(conn: HttpConn) -> None:
        nonlocal ok, bad
        while not stop:
            status = await conn.request(body)
            if 200 <= status < 300:
                ok += 1
            else:
                bad += 1

    tasks = [asyncio.ensure_future(run(c)) for c in conns]
    await asyncio.sleep(0.5)  # warm-up
    pids = server.pids()
    ok0, s0, r0, c0 = ok, cpu_of(pids), cpu_of([redis.pid]), client_cpu()
    w0 = time.perf_counter()
    await asyncio.sleep(seconds)
    ok1, s1, r1, c1 = ok, cpu_of(pids), cpu_of([redis.pid]), client_cpu()
    w1 = time.perf_counter()
    stop = True
    await asyncio.gather(*tasks, return_exceptions=True)
    for conn in conns:
        conn.close()
    wall = w1 - w0
    return {
        "rate": (ok1 - ok0) / wall,
        "refused": bad,
        "server_cores": cpu_delta(s0, s1) / wall,
        "redis_cores": cpu_delta(r0, r1) / wall,
        "client_cores": (c1 - c0) / wall,
    }


async def flood_phase(
    server: Server, topic: str, n_ws: int, seconds: float, publishers: int = 8
) -> dict[str, float]:
    """``n_ws`` WebSocket subscribers while ``publishers`` publish flat out for ``seconds``
    (the issue's CPU figure): server CPU from the first publish until every publish
    accepted has reached every subscriber, per delivery."""
    rec: list[int] = []
    subs = [await subscribe("ws", server, topic, rec) for _ in range(n_ws)]
    conns: list[HttpConn] = []
    try:
        await warm_up(server, topic, subs)
        rec.clear()
        conns = [await http_conn(server.port) for _ in range(publishers)]
        stop = False
        ok = bad = 0

        async def run(conn: HttpConn) -> None:
            nonlocal ok, bad
            i = 0
            while not stop:
                i += 1
                body = server.publish_request(topic, notification(i, time.perf_counter_ns()))
                status = await conn.request(body)
                if 200 <= status < 300:
                    ok += 1
                else:
                    bad += 1

        pids = server.pids()
        s0, c0, w0 = cpu_of(pids), client_cpu(), time.perf_counter()
        tasks = [asyncio.ensure_future(run(c)) for c in conns]
        await asyncio.sleep(seconds)
        stop = True
        await asyncio.gather(*tasks, return_exceptions=True)
        complete = await wait_until(lambda: len(rec) >= ok * n_ws, 30)
        s1, c1, w1 = cpu_of(pids), client_cpu(), time.perf_counter()
    finally:
        for conn in conns:
            conn.close()
        for sub in subs:
            sub.close()
    return {
        "publishes": ok,
        "refused": bad,
        "delivered": len(rec),
        "expected": ok * n_ws,
        "complete": float(complete and bad == 0),
        "server_cpu": cpu_delta(s0, s1),
        "client_cpu": c1 - c0,
        "wall": w1 - w0,
    }


def record_flood(figures: Figures, label: str, got: dict[str, float]) -> None:
    per_k = 1e6 / max(1.0, got["delivered"])
    figures.values[f"server CPU ms per 1,000 deliveries ({label})"] = got["server_cpu"] * per_k
    figures.values[f"client CPU ms per 1,000 deliveries ({label})"] = got["client_cpu"] * per_k
    figures.notes.append(
        f"{label}: {got['publishes']:.0f} publishes, {got['delivered']:.0f} deliveries in "
        f"{got['wall']:.1f} s (publishing for the first part, then draining); server "
        f"{got['server_cpu'] / got['wall']:.2f} cores, client {got['client_cpu'] / got['wall']:.2f}"
    )
    if not got["complete"]:
        figures.incomplete.append(
            f"{label}: {got['delivered']:.0f} of {got['expected']:.0f} delivered, "
            f"{got['refused']:.0f} publishes refused"
        )


async def idle_phase(server: Server, topic: str, n: int) -> dict[str, float]:
    pids = server.pids()
    await asyncio.sleep(0.2)
    rss0 = rss_kib(pids)
    c0 = client_cpu()
    t0 = time.perf_counter()
    subs = await subscribe_many("sse", server, topic, n, None)
    accept = time.perf_counter() - t0
    c1 = client_cpu()
    await asyncio.sleep(0.5)
    rss1 = rss_kib(server.pids())
    for sub in subs:
        sub.close()
    await asyncio.gather(*(s.closed for s in subs))
    await asyncio.sleep(0.5)
    return {"accept": accept, "rss_per_conn": (rss1 - rss0) / n, "client_cpu": c1 - c0}


async def serving_probe(
    server: Server, topic: str, timeout: float, start: float | None = None
) -> float:
    """Seconds from ``start`` (default: now) until a new subscriber got a publish made after
    it subscribed (retrying every 5 ms while the server refuses); raises after ``timeout``."""
    start = time.perf_counter() if start is None else start
    deadline = start + timeout
    while time.perf_counter() < deadline:
        try:
            sub = await subscribe("sse", server, topic)
        except (ConnectionError, OSError, TimeoutError):
            await asyncio.sleep(0.005)
            continue
        try:
            while time.perf_counter() < deadline:
                try:
                    conn = await http_conn(server.port)
                    status = await conn.request(
                        server.publish_request(topic, notification(7, time.perf_counter_ns()))
                    )
                    conn.close()
                except (ConnectionError, OSError):
                    status = 0
                if 200 <= status < 300:
                    if await wait_until(lambda s=sub: s.count >= 1, 2.0):  # type: ignore[misc]
                        return time.perf_counter() - start
                await asyncio.sleep(0.005)
        finally:
            sub.close()
    raise RuntimeError(f"{server.name} did not serve within {timeout} s")


async def start_serving(server: Server, topic: str, figures: Figures) -> float:
    """Start ``server`` and probe it; a start that does not serve within 15 s is stopped
    and tried again (twice), and noted."""
    for attempt in range(3):
        began = time.perf_counter()
        server.start()
        try:
            return await serving_probe(server, topic, 15, began)
        except RuntimeError:
            figures.notes.append(f"start {attempt + 1} did not serve within 15 s: restarted")
            server.stop()
    raise RuntimeError(f"{server.name} did not serve after 3 starts")


#: After a start, before a phase measures: the phases' figures are steady-state costs per
#: delivery, and rshub defers ~0.1 s of CPU of its start (per process) to a second after it
#: serves (aiohttp's client trust, its own TLS context, prometheus_client, the document
#: models): inside the first phase's window, that start-up work was counted per delivery
#: (py-spy of the mixed phase: client_trust.load 5.7% of its samples). Both servers wait.
WARM_UP_SECONDS = 2.0


async def run_server(
    cls: type[Server], workdir: Path, args: argparse.Namespace, profiler: Profiler
) -> Figures:
    figures = Figures()
    v = figures.values
    redis = Redis(workdir / "redis")
    server = cls(workdir, redis)
    only = set(args.only or PHASES)
    try:
        v["first start s"] = await start_serving(server, "probe", figures)
        await asyncio.sleep(WARM_UP_SECONDS)
        for name, n_sse, n_ws in (("mixed", 100, 100), ("sse", 100, 0), ("ws", 0, 100)):
            if name not in only:
                continue
            if server.name == "rshub":
                profiler.start(server.pid, f"{args.run_tag}-{name}")
            got = await stream_phase(server, redis, name, n_sse, n_ws, args.rate, args.seconds)
            profiler.stop()
            record_stream(figures, name, got)
        if "tput" in only:
            if server.name == "rshub":
                profiler.start(server.pid, f"{args.run_tag}-tput")
            got_t = await throughput_phase(server, redis, "tput", args.tput_seconds)
            profiler.stop()
            v["publishes/s accepted (8 publishers)"] = got_t["rate"]
            figures.notes.append(
                f"tput: server {got_t['server_cores']:.2f} cores, Redis "
                f"{got_t['redis_cores']:.2f}, client {got_t['client_cores']:.2f}, "
                f"refused {got_t['refused']:.0f}"
            )
        if "flood" in only:
            if server.name == "rshub":
                profiler.start(server.pid, f"{args.run_tag}-flood")
            got_f = await flood_phase(server, "flood", 100, args.tput_seconds)
            profiler.stop()
            record_flood(figures, FLOOD, got_f)
        if "idle" in only:
            if server.name == "rshub":
                profiler.start(server.pid, f"{args.run_tag}-idle")
            got_i = await idle_phase(server, "idle", args.idle)
            profiler.stop()
            v[f"accept {args.idle} SSE s"] = got_i["accept"]
            v["RSS per idle SSE KiB"] = got_i["rss_per_conn"]
            figures.notes.append(f"idle: client CPU {got_i['client_cpu']:.2f} s to connect")
        if "restart" in only:
            # As before every phase: the previous one (5,000 connections closed by the idle
            # phase) settles first; right after it a restart took ~0.15-0.2 s longer, for
            # no reason of the start's own (2026-11-25, a script timing both).
            await asyncio.sleep(WARM_UP_SECONDS)
            server.kill()
            client_before = client_cpu()
            began = time.perf_counter()
            server.start()
            try:
                v["restart→serving s"] = await serving_probe(server, "restart", 15, began)
                figures.notes.append(
                    f"restart: server CPU {sum(cpu_of(server.pids()).values()):.2f} s, client "
                    f"CPU {client_cpu() - client_before:.2f} s of "
                    f"{v['restart→serving s']:.3f} s"
                )
            except RuntimeError:
                v["restart→serving s"] = float("nan")
                figures.incomplete.append("restart: not serving within 15 s")
                server.stop()
                await start_serving(server, "probe3", figures)
        if "mixed2" in only:
            # A fresh Redis for both: Nchan 1.3.6 on the Redis its SIGKILLed predecessor
            # used failed here ("got a NULL redis reply") once restarted with 2 workers.
            server.stop()
            redis.stop()
            redis = Redis(workdir / "redis2")
            server = cls(workdir, redis, workers=2)
            await start_serving(server, "probe2", figures)
            await asyncio.sleep(WARM_UP_SECONDS)
            got = await stream_phase(server, redis, "mixed2", 100, 100, args.rate, args.seconds)
            record_stream(figures, "mixed2", got, cpu_only=True)
            if "flood" in only:
                if server.name == "rshub":  # one of the two workers (the parent only waits)
                    workers = [p for p in server.pids() if p != server.pid]
                    profiler.start(workers[0], f"{args.run_tag}-flood2-worker")
                got_f = await flood_phase(server, "flood2", 100, args.tput_seconds)
                profiler.stop()
                record_flood(figures, FLOOD2, got_f)
    finally:
        profiler.stop()
        server.stop()
        redis.stop()
    return figures


def record_stream(
    figures: Figures, name: str, got: dict[str, object], cpu_only: bool = False
) -> None:
    v = figures.values
    per_k = 1000 / max(1, int(got["delivered"]))  # type: ignore[call-overload]
    label = {"mixed": "100 SSE+100 WS", "sse": "100 SSE", "ws": "100 WS", "mixed2": "2 procs"}[name]
    if not cpu_only:
        for kind in ("ws", "sse"):
            rec = got[kind]
            assert isinstance(rec, list)
            if rec:
                v[f"{kind.upper()} p50 ms ({label})"] = pct(rec, 0.5)
                v[f"{kind.upper()} p99 ms ({label})"] = pct(rec, 0.99)
        if name == "mixed":
            rtt = got["rtt"]
            assert isinstance(rtt, list)
            v["publish round trip p50 ms"] = pct(rtt, 0.5)
    v[f"server CPU ms per 1,000 deliveries ({label})"] = float(got["server_cpu"]) * per_k * 1000  # type: ignore[arg-type]
    if name in ("mixed", "mixed2"):
        v[f"Redis CPU ms per 1,000 deliveries ({label})"] = float(got["redis_cpu"]) * per_k * 1000  # type: ignore[arg-type]
        v[f"client CPU ms per 1,000 deliveries ({label})"] = float(got["client_cpu"]) * per_k * 1000  # type: ignore[arg-type]
    voluntary, involuntary = got["switches"]  # type: ignore[misc]
    v[f"server context switches per publish, involuntary ({label})"] = involuntary
    wall = float(got["wall"])  # type: ignore[arg-type]
    figures.notes.append(
        f"{name}: {got['delivered']} deliveries in {wall:.1f} s; server "
        f"{float(got['server_cpu']) / wall:.2f} cores, Redis {float(got['redis_cpu']) / wall:.2f}, "  # type: ignore[arg-type]
        f"client {float(got['client_cpu']) / wall:.2f}; server context switches per "  # type: ignore[arg-type]
        f"publish {voluntary:.1f} voluntary, {involuntary:.1f} involuntary"
    )
    if not got["complete"]:
        figures.incomplete.append(
            f"{name}: {got['delivered']} of {got['expected']} delivered, "
            f"{got['failed']} publishes failed"
        )


# -- report -------------------------------------------------------------------------------

#: The issue's own CPU figure: 100 WebSocket subscribers, 8 publishers flat out.
FLOOD = "100 WS, 8 publishers flat out"
FLOOD2 = "100 WS, 8 publishers flat out, 2 procs"

#: figure -> (target on the rshub/Nchan ratio, or on rshub's own value for "abs")
TARGETS: dict[str, tuple[str, float]] = {
    "WS p50 ms (100 SSE+100 WS)": ("ratio", 1.3),
    "SSE p50 ms (100 SSE+100 WS)": ("ratio", 1.3),
    "WS p50 ms (100 WS)": ("ratio", 1.3),
    "SSE p50 ms (100 SSE)": ("ratio", 1.3),
    "server CPU ms per 1,000 deliveries (100 SSE+100 WS)": ("ratio", 1.5),
    "server CPU ms per 1,000 deliveries (2 procs)": ("ratio", 1.5),
    f"server CPU ms per 1,000 deliveries ({FLOOD})": ("ratio", 1.5),
    f"server CPU ms per 1,000 deliveries ({FLOOD2})": ("ratio", 1.5),
    "RSS per idle SSE KiB": ("ratio", 1.5),
    "accept 5000 SSE s": ("ratio", 1.5),
    "restart→serving s": ("abs", 0.3),
}


def met(name: str, mine: float, peer: float) -> bool | None:
    target = TARGETS.get(name)
    if target is None:
        return None
    kind, bound = target
    value = mine if kind == "abs" else mine / peer if peer else float("inf")
    return value <= bound


def fmt(x: float) -> str:
    if x != x:  # nan
        return "—"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.3g}" if abs(x) < 10 else f"{x:.1f}"


def print_table(mine: Figures, peer: Figures) -> None:
    print("| figure | rshub | Nchan | rshub/Nchan | target |")
    print("|---|---:|---:|---:|---|")
    for name, value in mine.values.items():
        other = peer.values.get(name, float("nan"))
        ratio = value / other if other else float("nan")
        target = TARGETS.get(name)
        verdict = ""
        if target:
            ok = met(name, value, other)
            bound = "≤" if target[0] == "ratio" else "rshub ≤"
            verdict = f"{bound} {target[1]}: {'met' if ok else 'NOT met'}"
        print(f"| {name} | {fmt(value)} | {fmt(other)} | {fmt(ratio)} | {verdict} |")
    for side in (mine, peer):
        for note in side.notes:
            print(f"  {'rshub' if side is mine else 'Nchan'} {note}")
        for miss in side.incomplete:
            print(f"  {'rshub' if side is mine else 'Nchan'} INCOMPLETE {miss}")


def print_summary(runs: list[tuple[Figures, Figures]]) -> None:
    n = len(runs)
    need = (n // 2) + 1 if n > 1 else 1
    print(f"\n## Summary over {n} run(s): medians; a target is met if met in ≥ {need} of {n}\n")
    print("| figure | rshub | Nchan | rshub/Nchan (median; min-max) | target met in |")
    print("|---|---:|---:|---:|---|")
    for name in runs[0][0].values:
        mines = [m.values.get(name, float("nan")) for m, _ in runs]
        peers = [p.values.get(name, float("nan")) for _, p in runs]
        ratios = [a / b if b else float("nan") for a, b in zip(mines, peers, strict=True)]
        good = [r for r in ratios if r == r]
        cell = (
            f"{fmt(statistics.median(good))} ({fmt(min(good))}-{fmt(max(good))})" if good else "—"
        )
        target = TARGETS.get(name)
        verdict = ""
        if target:
            hits = sum(bool(met(name, a, b)) for a, b in zip(mines, peers, strict=True))
            bound = f"{'ratio' if target[0] == 'ratio' else 'rshub'} ≤ {target[1]}"
            verdict = f"{bound}: {hits} of {n} ({'met' if hits >= need else 'NOT met'})"
        print(
            f"| {name} | {fmt(statistics.median(mines))} | {fmt(statistics.median(peers))} "
            f"| {cell} | {verdict} |"
        )


def figure_name(row: str) -> tuple[str, str] | None:
    """A summary row's name as a record's figure name and unit: ``WS p50 ms (100 WS)`` is
    ``WS p50 (100 WS)`` in ms; None for a row whose unit the records do not know."""
    if row.startswith("publishes/s accepted"):
        return row, "/s"
    if row.startswith("server context switches"):
        return row, "switches"
    words = row.split(" ")
    for unit in ("ms", "s", "KiB"):
        if unit in words:
            words.remove(unit)
            return " ".join(words), unit
    return None


def run_record(
    runs: list[tuple[Figures, Figures]], command: str, date: str, checkout: Path, alone: bool
) -> dict[str, object]:
    """The summary as one record of bench/results/peer_nchan.jsonl (``--record``): rshub's
    median and per-run values, Nchan's beside them (the baseline), the ratio, the target and
    in how many runs it was met. With rshub alone (``--servers rshub``) the figures are named
    ``[rshub alone]``: they are not the figures measured beside Nchan."""
    n = len(runs)
    need = (n // 2) + 1 if n > 1 else 1
    figures: list[dict[str, object]] = []
    for row in runs[0][0].values:
        named = figure_name(row)
        mines = [round(m.values[row], 4) for m, _ in runs if row in m.values]
        if named is None or not mines:
            continue
        name, unit = named
        if alone and not name.startswith("restart"):
            name += " [rshub alone]"
        figure: dict[str, object] = {
            "name": name,
            "unit": unit,
            "value": statistics.median(mines),
            "runs": mines,
        }
        peers = [p.values.get(row, float("nan")) for _, p in runs]
        pairs = [
            (m.values[row], p) for (m, _), p in zip(runs, peers, strict=True) if row in m.values
        ]
        if not alone and all(p == p and p for p in peers):
            ratios = [round(a / b, 4) for a, b in pairs]
            kept = [round(p, 4) for p in peers]
            figure["baseline"] = {"name": "Nchan", "value": statistics.median(kept), "runs": kept}
            figure["ratio"] = {
                "value": statistics.median(ratios),
                "min": min(ratios),
                "max": max(ratios),
                "runs": ratios,
            }
        target = TARGETS.get(row)
        if target is not None and (target[0] == "abs" or "ratio" in figure):
            hits = sum(bool(met(row, a, b)) for a, b in pairs)
            figure["target"] = f"{'ratio' if target[0] == 'ratio' else 'rshub'} ≤ {target[1]}"
            figure["met"] = f"{hits} of {n} ({'met' if hits >= need else 'NOT met'})"
        figures.append(figure)
    record: dict[str, object] = {
        "bench": "peer_nchan",
        "command": command,
        "date": date,
        "until": utc_now(),
        "commit": commit_of(checkout),
        "machine": this_machine(),
        "runs": n,
        "figures": figures,
    }
    return {k: v for k, v in record.items() if v is not None}


def top_own(raw: Path, limit: int = 20) -> list[tuple[str, int, float]]:
    """The ``limit`` frames with the most own (leaf) samples in a py-spy raw profile."""
    rows, total = pyspy_raw.top_own([raw], limit)
    return [(frame, c, 100 * c / total) for frame, c in rows]


def write_profiles(directory: Path) -> Path:
    out = directory / "profiles.md"
    lines = [
        "# rshub under `bench/peer_nchan.py --profile`: top 20 frames by own time",
        "",
        "py-spy `record --format raw --nonblocking --rate 250`; own = samples whose innermost",
        "frame is this function (idle samples not recorded). uvloop is C: its own work (epoll,",
        "callbacks, socket reads) shows as `Runner.run`; a transport write's syscall shows as",
        "the Python line that called `transport.write`.",
    ]
    for raw in sorted(directory.glob("*.txt")):
        rows = top_own(raw)
        lines += ["", f"## {raw.stem}", "", "| # | frame | samples | % |", "|---:|---|---:|---:|"]
        lines += [f"| {i} | `{f}` | {c} | {p:.1f} |" for i, (f, c, p) in enumerate(rows, 1)]
    out.write_text("\n".join(lines) + "\n")
    return out


async def main_async(args: argparse.Namespace) -> int:
    base = Path(tempfile.mkdtemp(prefix="rshub-peer-nchan-"))
    profiler = Profiler(Path(args.profile) if args.profile else None)
    runs: list[tuple[Figures, Figures]] = []
    status = 0
    try:
        for r in range(args.repeat):
            order: list[type[Server]] = [Rshub, Nchan] if r % 2 == 0 else [Nchan, Rshub]
            order = [c for c in order if c.name.lower() in args.servers]
            print(
                f"\n### run {r + 1} of {args.repeat} "
                f"({' first, then '.join(c.name for c in order)})\n",
                flush=True,
            )
            got: dict[str, Figures] = {"rshub": Figures(), "Nchan": Figures()}
            for cls in order:
                args.run_tag = f"run{r + 1}"
                got[cls.name] = await run_server(
                    cls, base / f"run{r + 1}-{cls.name}", args, profiler
                )
            print_table(got["rshub"], got["Nchan"])
            if got["rshub"].incomplete or got["Nchan"].incomplete:
                status = 2
            runs.append((got["rshub"], got["Nchan"]))
        if runs and runs[0][0].values:
            print_summary(runs)
            if args.record:
                command = " ".join(["bench/peer_nchan.py", *args.argv])
                alone = args.servers == {"rshub"}
                record = run_record(runs, command, args.began, args.checkout, alone)
                record |= {k: v for k, v in (("code", args.code), ("label", args.label)) if v}
                print(f"\nrecorded in {append_record(record)}")
        if args.profile:
            print(f"\nprofiles: {write_profiles(Path(args.profile))}")
    finally:
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    return status


def versions() -> str:
    import aiohttp

    nginx = subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip()
    nchan = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", "libnginx-mod-nchan"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    redis = subprocess.run(
        [find_redis_server(), "--version"], capture_output=True, text=True
    ).stdout.split()
    redis_v = next((w for w in redis if w.startswith("v=")), "?")
    return (
        f"{nginx}; libnginx-mod-nchan {nchan or '?'}; redis-server {redis_v}; "
        f"Python {sys.version.split()[0]}; aiohttp {aiohttp.__version__}; "
        f"payload {len(notification(1, time.perf_counter_ns()))} bytes"
    )


NCHAN_PACKAGES = ("nginx", "libnginx-mod-nchan")
#: Debian's hook that ``invoke-rc.d`` asks before starting a service; 101 is "not allowed".
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")


def nchan_installed() -> bool:
    return Path(NGINX_MODULE).exists() and shutil.which("nginx") is not None


def install_nchan() -> str | None:
    """Install Debian's nginx and Nchan module when missing and we may (root with
    ``apt-get``), so that the bench needs nothing installed by hand; None once they are
    there, else what the user must do. A package's maintainer scripts would start and enable
    nginx as a system service on port 80: a ``policy-rc.d`` that refuses every start is put in
    place for the install (where there is none), and the bench starts its own nginx."""
    if nchan_installed():
        return None
    manual = f"nginx with Nchan is missing: apt-get install -y {' '.join(NCHAN_PACKAGES)}"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return manual + " (as root), or run with --servers rshub"
    print(f"# installing {' '.join(NCHAN_PACKAGES)} with apt-get (Debian's packages)", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    ours = not POLICY_RC_D.exists()
    if ours:
        POLICY_RC_D.write_text("#!/bin/sh\n# bench/peer_nchan.py: no service starts\nexit 101\n")
        POLICY_RC_D.chmod(0o755)
    try:
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env, timeout=600)
        done = subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *NCHAN_PACKAGES],
            check=False,
            env=env,
            timeout=900,
        )
    finally:
        if ours:
            POLICY_RC_D.unlink(missing_ok=True)
    if done.returncode != 0 or not nchan_installed():
        return f"{manual} (apt-get exited {done.returncode})"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--seconds", type=float, default=5.0, help="paced publishing per stream phase"
    )
    parser.add_argument("--rate", type=float, default=100.0, help="publishes/s in stream phases")
    parser.add_argument("--tput-seconds", type=float, default=3.0)
    parser.add_argument("--idle", type=int, default=5000, help="idle SSE connections")
    parser.add_argument(
        "--only", action="append", choices=PHASES, help="phases to run (repeatable)"
    )
    parser.add_argument("--servers", default="rshub,nchan", help="comma-separated: rshub, nchan")
    parser.add_argument("--profile", metavar="DIR", help="py-spy rshub in each phase into DIR")
    parser.add_argument(
        "--hub-src", metavar="DIR", help="run rshub from this checkout (e.g. a worktree of main)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, configs)")
    parser.add_argument(
        "--record", action="store_true", help="append the summary to bench/results/peer_nchan.jsonl"
    )
    parser.add_argument(
        "--code",
        choices=CODES,
        help="with --record: whose code this is (earlier: the code a change replaced, with "
        "--hub-src; bench/render.py shows only main's as current)",
    )
    parser.add_argument("--label", help="with --record: what this run is, beside the others")
    args = parser.parse_args()
    args.argv = [a for a in sys.argv[1:] if a != "--record"]
    args.began = utc_now()
    args.checkout = Path(args.hub_src).resolve() if args.hub_src else ROOT
    if args.hub_src:
        HUB_SRC["PYTHONPATH"] = str(Path(args.hub_src).resolve())
    args.servers = {s.strip().lower() for s in args.servers.split(",")}
    compile_hub(Path(args.hub_src).resolve() if args.hub_src else ROOT)
    if "nchan" in args.servers and (missing := install_nchan()) is not None:
        print(missing, file=sys.stderr)
        return 1
    nofile = raise_nofile()
    if nofile < args.idle + 500:
        print(f"RLIMIT_NOFILE {nofile} is below {args.idle + 500}", file=sys.stderr)
        return 1
    print(f"# bench/peer_nchan.py {' '.join(sys.argv[1:])}")
    print(
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} CPUs; {versions()}"
    )
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        return runner.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
