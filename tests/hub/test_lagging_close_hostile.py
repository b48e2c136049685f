"""Hostile clients while the hub holds a lagging WebSocket client's connection.

Once a client is dropped as too slow, the hub holds its socket (``hub.web.lagging_close``)
and reads what the client sends, while the client takes its backlog. Whatever it does then,
the hub lets go within its bounds, logs no error and stalls nothing: a reset, bytes that are
no WebSocket frame, a half-close (it still gets its close frame), a client that never reads
again, and one that trickles a few bytes forever (too few to open its receive window: no
progress the hub can see); each is let go within ``LINGER_ROUNDS`` times
``stream_close_seconds`` at most; then a seeded mix of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
from typing import Any

import pytest

from hub.web.app import RUNTIME
from hub.web.lagging_close import LINGER_ROUNDS
from tests.conftest import Hub
from tests.hub.test_dropped_clients import _socket_inodes
from tests.hub.test_lagging_readers import _REASON, _frames, _not_dropped, _open_reader
from tests.support import TIME_SCALE, changes, notification, wait_for
from tests.watchdog import Watchdog

_CLOSE_SECONDS = 0.5
_KINDS = ("reset", "garbage", "half-close", "silent", "trickle")


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {
        "heartbeat_seconds": 60,
        "client_buffer_events": 10,
        "stream_close_seconds": _CLOSE_SECONDS,
        "lag_retry_spread_seconds": 1.0,
    }


def _held(port: int, remote_ports: set[int]) -> int:
    """Sockets of this process (the hub's side) from ``port`` to any of ``remote_ports``,
    in any TCP state: one the hub let go of has no descriptor left."""
    mine, count = _socket_inodes(), 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.read().splitlines()[1:]:
                fields = row.split()
                local, remote, inode = fields[1], fields[2], int(fields[9])
                if (
                    int(local.rsplit(":", 1)[1], 16) == port
                    and int(remote.rsplit(":", 1)[1], 16) in remote_ports
                    and inode in mine
                ):
                    count += 1
    return count


async def _misbehave(
    sock: socket.socket,
    kind: str,
    loop: asyncio.AbstractEventLoop,
    rng: random.Random,
    dropped: asyncio.Event,
) -> int | None:
    """What a client does from its start (lagging behind the storm, so that it is dropped)
    and once ``dropped``; the close code it read, if it read on."""
    with contextlib.suppress(OSError):
        if kind == "reset":  # gone at once once dropped, with a reset
            await dropped.wait()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        elif kind == "garbage":  # bytes that are no frame once dropped, then silence
            await dropped.wait()
            await loop.sock_sendall(sock, rng.randbytes(rng.randint(1, 4096)))
        elif kind == "half-close":  # reads slowly; once dropped, sends nothing more and
            # reads on at its pace (a busy machine must not make it look stopped)
            buf = bytearray()
            async with asyncio.timeout(30 * TIME_SCALE):
                while True:
                    if not dropped.is_set():
                        await asyncio.sleep(0.05)
                    elif not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_WR)
                    chunk = await loop.sock_recv(sock, 4096)
                    if not chunk:
                        return None
                    buf += chunk
                    for opcode, payload in _frames(buf):
                        if opcode == 0x8:
                            assert _REASON.fullmatch(payload[2:].decode()), payload
                            return int.from_bytes(payload[:2], "big")
        elif kind == "trickle":  # a few bytes now and then, forever
            while True:
                await asyncio.sleep(_CLOSE_SECONDS / 3)
                if not await loop.sock_recv(sock, 16):
                    return None
    return None


async def _drop_all(hub: Hub, kinds: list[str], rng: random.Random) -> list[int | None]:
    loop = asyncio.get_running_loop()
    port = int(hub.url.rsplit(":", 1)[1])
    storm = notification([{**c, "loc": c["loc"] + "/" + "z" * 1000} for c in changes(10)])
    clients = [await _open_reader(port, loop) for _ in kinds]
    ports = {sock.getsockname()[1] for sock, _ in clients}
    dropped = asyncio.Event()
    behaviours = [
        asyncio.create_task(_misbehave(sock, kind, loop, rng, dropped))
        for (sock, _), kind in zip(clients, kinds, strict=True)
    ]
    try:
        await wait_for(lambda: _not_dropped(hub) == len(kinds))
        async with asyncio.timeout(60 * TIME_SCALE):
            while _not_dropped(hub) > 0:
                assert (await hub.publish("t", storm)).status == 202
        # Each dropped stream's handler is past its last write, in the lagging close.
        feed = hub.app[RUNTIME].feeds._feeds["t"]
        await wait_for(lambda: all(stream.writer is None for stream in feed.streams))
        dropped.set()
        # Held no longer than its bounds: a client that takes nothing for the close
        # allowance is let go (then cut off after as much again), one that trickles
        # after LINGER_ROUNDS of it.
        await wait_for(
            lambda: _held(port, ports) == 0,
            timeout=(LINGER_ROUNDS + 2) * _CLOSE_SECONDS + 5 * TIME_SCALE,
        )
        async with hub.session.get(f"{hub.url}/healthz") as health:
            assert health.status == 200
        readers = [t for t, kind in zip(behaviours, kinds, strict=True) if kind == "half-close"]
        if readers:
            await asyncio.wait_for(asyncio.gather(*readers), 20 * TIME_SCALE)
        return [t.result() if t.done() and not t.cancelled() else None for t in behaviours]
    finally:
        for task in behaviours:
            task.cancel()
        for sock, _ in clients:
            sock.close()


@pytest.mark.timeout(120)
async def test_named_hostile_clients_while_held(hub: Hub) -> None:
    assert (await hub.publish("t", notification(changes(1)))).status == 202
    async with Watchdog(stall_seconds=0.5) as dog:
        codes = await _drop_all(hub, list(_KINDS), random.Random(0))
    assert codes[_KINDS.index("half-close")] == 1013  # it read on: its close frame came
    await dog.sockets_back(timeout=10 * TIME_SCALE)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", range(2))
async def test_a_seeded_mix_of_hostile_clients_while_held(hub: Hub, seed: int) -> None:
    rng = random.Random(seed)
    assert (await hub.publish("t", notification(changes(1)))).status == 202
    async with Watchdog(stall_seconds=0.5) as dog:
        await _drop_all(hub, [rng.choice(_KINDS) for _ in range(12)], rng)
    await dog.sockets_back(timeout=10 * TIME_SCALE)
