"""Stream clients the hub drops (too slow) are really gone: their TCP connections end.

A client that stops reading leaves the hub's send buffer full; a graceful close waits for
that buffer to drain, i.e. forever. After its close frame (WebSocket) or last event (SSE)
the hub gives a dropped client ``stream_close_seconds``, then aborts the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
from typing import Any

import pytest

from hub.web.app import RUNTIME
from tests.conftest import Hub
from tests.support import TIME_SCALE, changes, notification, wait_for
from tests.watchdog import Watchdog

_WS_UPGRADE = (
    b"GET /topics/t/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\n\r\n"
)
_SSE_GET = b"GET /topics/t/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"
_CLIENTS = 8  # of each kind
_CLOSE_SECONDS = 1.0


def _socket_inodes() -> set[int]:
    """Inodes of the sockets this process holds (``/proc/self/fd``)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed while listed
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def established(local_port: int | None, remote_ports: set[int]) -> int:
    """ESTABLISHED TCP connections this process holds from ``local_port`` (any if None)
    to any of ``remote_ports`` (e.g. the hub's side of the test's clients), from
    ``/proc/net/tcp``."""
    mine = _socket_inodes()
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], int(fields[9])
            if (
                state == "01"
                and local_port in (None, int(local.rsplit(":", 1)[1], 16))
                and int(remote.rsplit(":", 1)[1], 16) in remote_ports
                and inode in mine
            ):
                count += 1
    return count


async def _stalled_client(port: int, request: bytes, receive_buffer: int = 4096) -> socket.socket:
    """A client with a tiny receive buffer that reads the response head, then nothing."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, request)
    head = b""
    async with asyncio.timeout(10 * TIME_SCALE):
        while b"\r\n\r\n" not in head:
            chunk = await loop.sock_recv(sock, 1)
            assert chunk, f"the hub closed the connection after {head!r}"
            head += chunk
    assert head.split(b" ", 2)[1] in (b"101", b"200"), head
    return sock


def _to_redis(hub: Hub) -> int:
    """The hub's open connections to its Redis."""
    return established(None, {hub.redis.connection_pool.connection_kwargs["port"]})


def _consumers(hub: Hub) -> int:
    feed = hub.app[RUNTIME].feeds._feeds.get("t")
    return feed.consumers if feed else 0


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    # The heartbeat stays out of the way: these clients are dropped for being too slow.
    return {
        "heartbeat_seconds": 60,
        "client_buffer_events": 10,
        "stream_close_seconds": _CLOSE_SECONDS,
    }


async def _warm_up(hub: Hub) -> bytes:
    """Open what stays open on purpose (the publishing session's pooled connection, the
    parser's worker processes, the hub's Redis connections for publishing and following
    the topic), so that the watchdog's socket count is about the stream clients only.
    Returns a notification big enough to fill a stalled client's buffers quickly."""
    async with hub.session.ws_connect(f"{hub.url}/topics/t/ws"):
        await wait_for(lambda: _consumers(hub) == 1)
    await wait_for(lambda: _consumers(hub) == 0)
    big = notification([{**c, "loc": c["loc"] + "/" + "z" * 4000} for c in changes(100)])
    assert (await hub.publish("t", big)).status == 202
    return big


async def _publish_until_all_dropped(hub: Hub, big: bytes) -> None:
    async with asyncio.timeout(60 * TIME_SCALE):
        while _consumers(hub) > 0:
            assert (await hub.publish("t", big)).status == 202


@pytest.mark.timeout(120)
async def test_dropped_stream_clients_leave_no_connection_behind(hub: Hub) -> None:
    port = int(hub.url.rsplit(":", 1)[1])
    clients: list[socket.socket] = []
    big = await _warm_up(hub)
    async with Watchdog(stall_seconds=0.5) as dog:
        try:
            for request in (_WS_UPGRADE, _SSE_GET):
                for _ in range(_CLIENTS):
                    clients.append(await _stalled_client(port, request))
            ports = {c.getsockname()[1] for c in clients}
            ws_ports = {c.getsockname()[1] for c in clients[:_CLIENTS]}
            await wait_for(lambda: _consumers(hub) == 2 * _CLIENTS)
            assert established(port, ports) == 2 * _CLIENTS

            await _publish_until_all_dropped(hub, big)  # every client dropped as too slow

            # Dropped: within the close allowance (plus scheduling slack) the hub's side of
            # every connection is gone, though none of the clients ever read again.
            try:
                await wait_for(lambda: established(port, ports) == 0, timeout=_CLOSE_SECONDS + 4)
            except AssertionError:
                ws_left = established(port, ws_ports)
                sse_left = established(port, ports - ws_ports)
                raise AssertionError(
                    f"still ESTABLISHED: {ws_left} of {_CLIENTS} WebSocket and "
                    f"{sse_left} of {_CLIENTS} SSE connections"
                ) from None
            async with hub.session.get(f"{hub.url}/healthz") as health:
                assert health.status == 200
        finally:
            for sock in clients:
                sock.close()
    # The hub's Redis pool may have grown meanwhile (it keeps its connections): not a leak.
    await dog.sockets_back()


#: How a fuzzed client misbehaves once its stream is open.
_KINDS = ("silent", "trickle", "half-close", "garbage")


async def _misbehave(sock: socket.socket, kind: str, rng: random.Random) -> None:
    loop = asyncio.get_running_loop()
    with contextlib.suppress(OSError):
        if kind == "trickle":  # reads a little, slowly, then stops for good
            for _ in range(rng.randint(1, 6)):
                await asyncio.sleep(rng.uniform(0.01, 0.1))
                if not await loop.sock_recv(sock, rng.choice((64, 1024, 8192))):
                    return
        elif kind == "half-close":  # says it is done sending, but never reads either
            sock.shutdown(socket.SHUT_WR)
        elif kind == "garbage":  # bytes that are no WebSocket frame (nor HTTP request)
            await loop.sock_sendall(sock, rng.randbytes(rng.randint(1, 64)))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", range(3))
async def test_stalled_clients_of_every_kind_leave_nothing_behind(hub: Hub, seed: int) -> None:
    rng = random.Random(seed)
    port = int(hub.url.rsplit(":", 1)[1])
    clients: list[socket.socket] = []
    behaviours: list[asyncio.Task[None]] = []
    big = await _warm_up(hub)
    async with Watchdog(stall_seconds=0.5) as dog:
        try:
            for _ in range(12):
                request = rng.choice((_WS_UPGRADE, _SSE_GET))
                sock = await _stalled_client(port, request, rng.choice((2048, 4096, 16384)))
                clients.append(sock)
                behaviours.append(asyncio.create_task(_misbehave(sock, rng.choice(_KINDS), rng)))
            ports = {c.getsockname()[1] for c in clients}

            await _publish_until_all_dropped(hub, big)
            await wait_for(lambda: established(port, ports) == 0, timeout=_CLOSE_SECONDS + 4)
            async with hub.session.get(f"{hub.url}/healthz") as health:
                assert health.status == 200
        finally:
            for task in behaviours:
                task.cancel()
            await asyncio.gather(*behaviours, return_exceptions=True)
            for sock in clients:
                sock.close()
    await dog.sockets_back()
