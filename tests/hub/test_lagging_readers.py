"""Readers dropped for lagging behind are told so, where to resume and when to come back.

A WebSocket reader the hub drops as too slow has not read what was sent to it: its close
frame queues behind that backlog. A reader that goes on reading, however far behind, and
sends its keepalive pings meanwhile, must find a close frame ``1013`` naming ``since=<id>``
and a suggested wait behind its backlog, then the end of the connection, never a reset (a
reset throws away what it had not read yet, close frame included). The suggested waits
are spread over ``lag_retry_spread_seconds``, so that a storm that drops a thousand readers
does not bring them back in the same instant. Resuming from the ``since=`` given loses
nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from hub.web.app import RUNTIME
from tests.conftest import Hub
from tests.support import TIME_SCALE, changes, notification, wait_for
from tests.watchdog import Watchdog

_READERS = 1000
_SPREAD = 10.0
#: Shorter than a dropped reader takes to read its backlog.
_CLOSE_SECONDS = 3.0
#: How a lagging reader reads: at most 1 kB every second while the storm lasts (it falls
#: behind), then 8 kB every 0.05 s (its backlog still takes seconds).
_SLOW, _PACE = (1.0, 1024), (0.05, 8192)
#: A lagging reader sends a ping (empty, masked) this often until it has the close frame.
_PING = 0.5
_UPGRADE = (
    b"GET /topics/t/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\n\r\n"
)
_REASON = re.compile(r"too slow; resume with since=(\d+-\d+); retry after (\d+(?:\.\d+)?) s")


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    # No heartbeat pings in the way: these readers are dropped for being too slow.
    return {
        "heartbeat_seconds": 60,
        "client_buffer_events": 10,
        "stream_close_seconds": _CLOSE_SECONDS,
        "lag_retry_spread_seconds": _SPREAD,
    }


@dataclass
class Ending:
    """What a reader found once it read on: the close frame (if any), how it ended."""

    code: int | None = None
    reason: str = ""
    #: ``eof`` (the hub's FIN), ``reset`` or ``timeout``.
    end: str = ""
    #: A reset before the close frame came: the close frame was thrown away.
    reset_before_close: bool = False
    #: Text messages before the close frame, and all bytes read.
    messages: int = 0
    read: int = 0
    #: The ids of the events received, when kept.
    ids: list[str] = field(default_factory=list)


async def _open_reader(port: int, loop: asyncio.AbstractEventLoop) -> tuple[socket.socket, bytes]:
    """A WebSocket reader with a small receive buffer and segment size (so that the hub's
    kernel buffers for it stay small too), its upgrade answered. Returns it and the bytes
    read past the response head."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1000)
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", port))
    await loop.sock_sendall(sock, _UPGRADE)
    head = b""
    async with asyncio.timeout(20 * TIME_SCALE):
        while b"\r\n\r\n" not in head:
            chunk = await loop.sock_recv(sock, 4096)
            assert chunk, f"the hub closed the connection after {head!r}"
            head += chunk
    status, _, rest = head.partition(b"\r\n\r\n")
    assert status.split(b" ", 2)[1] == b"101", status
    return sock, rest


def _frames(buf: bytearray) -> list[tuple[int, bytes]]:
    """Complete server frames (unmasked) taken off the front of ``buf``."""
    out = []
    while len(buf) >= 2:
        opcode, size = buf[0] & 0x0F, buf[1] & 0x7F
        at = 2
        if size == 126:
            if len(buf) < 4:
                break
            size, at = int.from_bytes(buf[2:4], "big"), 4
        elif size == 127:
            if len(buf) < 10:
                break
            size, at = int.from_bytes(buf[2:10], "big"), 10
        if len(buf) < at + size:
            break
        out.append((opcode, bytes(buf[at : at + size])))
        del buf[: at + size]
    return out


async def _lag(
    sock: socket.socket,
    first: bytes,
    loop: asyncio.AbstractEventLoop,
    calm: asyncio.Event,
    *,
    keep: bool = False,
) -> Ending:
    """Read everything the hub sends, slower than it comes (:data:`_SLOW`, then
    :data:`_PACE` once ``calm`` is set), with a ping each :data:`_PING` seconds. Answer the
    close frame as a client does (a masked close frame, zero mask), then read on until the
    connection ends. ``keep``: keep the ids
    of the events received."""
    ending, buf = Ending(), bytearray(first)
    pinged = loop.time()
    async with asyncio.timeout(60 * TIME_SCALE):
        while True:
            if ending.code is None and loop.time() - pinged >= _PING:
                # A client's keepalive ping goes out whatever it has read (as websockets'
                # does): bytes the hub receives after it closed its socket make a reset.
                pinged = loop.time()
                with contextlib.suppress(OSError):  # the read below sees it
                    await loop.sock_sendall(sock, b"\x89\x80\0\0\0\0")
            for opcode, payload in _frames(buf):
                if opcode == 0x1:
                    ending.messages += 1
                    if keep:
                        ending.ids += [event["id"] for event in orjson.loads(payload)]
                elif opcode == 0x8 and ending.code is None:
                    ending.code = int.from_bytes(payload[:2], "big")
                    ending.reason = payload[2:].decode()
                    reply = bytes((0x88, 0x80 | len(payload[:2]))) + b"\0\0\0\0" + payload[:2]
                    with contextlib.suppress(OSError):  # the read below sees it
                        await loop.sock_sendall(sock, reply)
            pause, most = _PACE if calm.is_set() else _SLOW
            await asyncio.sleep(pause)  # a reader that lags: the scenario is about time
            try:
                chunk = await loop.sock_recv(sock, most)
            except ConnectionResetError:
                ending.end = "reset"
                ending.reset_before_close = ending.code is None
                return ending
            if not chunk:
                ending.end = "eof"
                return ending
            buf += chunk
            ending.read += len(chunk)


def _consumers(hub: Hub) -> int:
    feed = hub.app[RUNTIME].feeds._feeds.get("t")
    return feed.consumers if feed else 0


def _not_dropped(hub: Hub) -> int:
    """Streams of the topic still followed (a dropped one's connection may linger)."""
    feed = hub.app[RUNTIME].feeds._feeds.get("t")
    return sum(not stream.overflowed for stream in feed.streams) if feed else 0


@pytest.mark.timeout(180)
async def test_a_thousand_lagging_readers_each_get_1013_with_since_and_a_spread_return(
    hub: Hub,
) -> None:
    loop = asyncio.get_running_loop()
    port = int(hub.url.rsplit(":", 1)[1])
    # Events of ~300 bytes, ten per publish: a reader's buffers (kernel and hub) fill in a
    # hundred or so.
    storm = notification([{**c, "loc": c["loc"] + "/" + "z" * 150} for c in changes(10)])
    assert (await hub.publish("t", storm)).status == 202  # the topic's feed, Redis warm
    readers: list[tuple[socket.socket, bytes]] = []
    lagging: list[asyncio.Task[Ending]] = []
    async with Watchdog(stall_seconds=0.5) as dog:
        try:
            gate = asyncio.Semaphore(50)

            async def open_one() -> None:
                async with gate:
                    readers.append(await _open_reader(port, loop))

            await asyncio.gather(*(open_one() for _ in range(_READERS)))
            await wait_for(lambda: _consumers(hub) == _READERS, timeout=20 * TIME_SCALE)
            calm = asyncio.Event()
            lagging += [asyncio.create_task(_lag(s, rest, loop, calm)) for s, rest in readers]

            published = 0
            async with asyncio.timeout(60 * TIME_SCALE):
                while _not_dropped(hub) > 0:  # the storm: until every reader is dropped
                    assert (await hub.publish("t", storm)).status == 202
                    published += 1
            calm.set()
            endings = await asyncio.gather(*lagging)
        finally:
            for task in lagging:
                task.cancel()
            await asyncio.gather(*lagging, return_exceptions=True)
            for sock, _ in readers:
                sock.close()
        kinds = Counter(
            "reset before close" if e.reset_before_close else f"{e.code} then {e.end}"
            for e in endings
        )
        most = max(e.read for e in endings)
        print(f"{published} publishes; endings: {dict(kinds)}; at most {most} bytes read")
        assert kinds == {"1013 then eof": _READERS}, kinds
        waits = []
        for e in endings:
            match = _REASON.fullmatch(e.reason)
            assert match, e.reason
            assert len(e.reason.encode()) <= 123
            waits.append(float(match.group(2)))
        # Spread: over the window, no 100 ms of it holding more than a small share.
        assert all(0 <= w <= _SPREAD for w in waits), (min(waits), max(waits))
        buckets = Counter(int(w * 10) for w in waits)
        busiest = max(buckets.values())
        print(f"suggested waits {min(waits):.2f}-{max(waits):.2f} s, busiest 100 ms: {busiest}")
        assert busiest <= _READERS * 0.03, buckets.most_common(3)
        assert max(waits) - min(waits) >= _SPREAD * 0.8
    await dog.sockets_back(timeout=_CLOSE_SECONDS * 15)


@pytest.mark.timeout(120)
async def test_resuming_from_the_since_a_lagging_reader_is_given_loses_nothing(hub: Hub) -> None:
    """The close frame comes behind every event the reader was sent, and names the last of
    them: the events before it and those after ``since=`` are the topic's, each once."""
    loop = asyncio.get_running_loop()
    port = int(hub.url.rsplit(":", 1)[1])
    async with Watchdog(stall_seconds=0.5) as dog:
        sock, rest = await _open_reader(port, loop)
        try:
            await wait_for(lambda: _not_dropped(hub) == 1)
            calm = asyncio.Event()
            reading = asyncio.create_task(_lag(sock, rest, loop, calm, keep=True))
            ids: list[str] = []
            async with asyncio.timeout(60 * TIME_SCALE):
                k = 0
                while _not_dropped(hub) > 0:
                    batch = [{**c, "loc": f"{c['loc']}/{'z' * 1000}"} for c in changes(10, start=k)]
                    resp = await hub.publish("t", notification(batch))
                    assert resp.status == 202
                    ids += (await resp.json())["ids"]
                    k += 10
            calm.set()
            ending = await reading
        finally:
            sock.close()
        assert ending.code == 1013 and ending.end == "eof", ending
        match = _REASON.fullmatch(ending.reason)
        assert match, ending.reason
        since = match.group(1)
        assert ending.ids == ids[: len(ending.ids)] and len(ending.ids) < len(ids)
        # Every event up to ``since`` arrived (a batch written as the drop came may come
        # after it, and again on resuming: never missing).
        assert since in ending.ids
        seen = ending.ids[: ending.ids.index(since) + 1]
        after: list[str] = []
        async with hub.session.ws_connect(f"{hub.url}/topics/t/ws?since={since}") as ws:
            async with asyncio.timeout(20 * TIME_SCALE):
                while len(seen) + len(after) < len(ids):
                    after += [event["id"] for event in await ws.receive_json()]
        assert seen + after == ids  # nothing lost, nothing twice, in order
    await dog.sockets_back(timeout=_CLOSE_SECONDS * 15)
