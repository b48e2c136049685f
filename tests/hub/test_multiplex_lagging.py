"""A stream of several topics whose client lags is ended as a one-topic stream is.

A WebSocket client of ``/ws?topic=…`` dropped as too slow finds, behind all it had not
read yet, a close frame ``1013`` naming its composite id (``since=``) and a wait drawn for
it alone, then the connection's end, never a reset; resuming from that id loses nothing.
An SSE client of ``/events?topic=…`` gets a last ``event: error`` with the same words, its
id as ``id:`` and its wait as ``retry:``.
"""

from __future__ import annotations

import asyncio
import re
import socket
from typing import Any

import pytest

from hub.core.stream_endings import TOO_SLOW
from tests.conftest import Hub
from tests.hub.test_lagging_readers import _lag, _not_dropped
from tests.hub.test_multiplex import publish
from tests.hub.topic_streams import resume_topics
from tests.support import TIME_SCALE, changes, notification, wait_for
from tests.watchdog import Watchdog

_SPREAD = 10.0
_UPGRADE = (
    b"GET /ws?topic=t&topic=u HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    b"Sec-WebSocket-Version: 13\r\n\r\n"
)
_REASON = re.compile(r"too slow; resume with since=(\S+); retry after (\d+(?:\.\d+)?) s")


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {
        "heartbeat_seconds": 60,
        "client_buffer_events": 10,
        "stream_close_seconds": 3.0,
        "lag_retry_spread_seconds": _SPREAD,
    }


def _small_socket() -> socket.socket:
    """A client socket with small buffers (as test_lagging_readers' own): the hub's kernel
    buffers for it stay small too, so that it lags soon."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1000)
    sock.setblocking(False)
    return sock


async def _open(port: int, loop: asyncio.AbstractEventLoop) -> tuple[socket.socket, bytes]:
    """A WebSocket reader of both topics with small buffers, upgraded."""
    sock = _small_socket()
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


async def test_lagging_websocket_readers_of_several_topics_get_1013_and_resume_exactly(
    hub: Hub,
) -> None:
    loop = asyncio.get_running_loop()
    port = int(hub.url.rsplit(":", 1)[1])
    storm = notification([{**c, "loc": c["loc"] + "/" + "z" * 150} for c in changes(10)])
    await publish(hub, "u")  # both topics exist
    published: list[str] = []  # the ids of every event of topic t, in order

    async def store_storm() -> None:
        resp = await hub.publish("t", storm)
        assert resp.status == 202
        published.extend((await resp.json())["ids"])

    await store_storm()
    readers = [await _open(port, loop) for _ in range(4)]
    calm = asyncio.Event()
    lagging = [asyncio.create_task(_lag(s, rest, loop, calm)) for s, rest in readers]
    try:
        async with Watchdog(stall_seconds=0.5) as dog:
            await wait_for(lambda: _not_dropped(hub) == len(readers))
            async with asyncio.timeout(60 * TIME_SCALE):
                while _not_dropped(hub) > 0:
                    await store_storm()
            calm.set()
            endings = await asyncio.gather(*lagging)
        await dog.sockets_back(timeout=10 * TIME_SCALE)
    finally:
        for task in lagging:
            task.cancel()
        for sock, _ in readers:
            sock.close()
    waits = []
    for ending in endings:
        assert (ending.code, ending.end, ending.reset_before_close) == (1013, "eof", False), ending
        match = _REASON.fullmatch(ending.reason)
        assert match, ending.reason
        waits.append(float(match.group(2)))
        assert 0 <= waits[-1] <= _SPREAD
    assert len(set(waits)) > 1  # each drew its own wait
    # Resuming from the id given: every event of t after it, in order, none before it.
    since = _REASON.fullmatch(endings[0].reason).group(1)  # type: ignore[union-attr]
    at = resume_topics(since)["t"]
    expected = [i for i in published if tuple(int(p) for p in i.split("-")) > at]
    expected += await publish(hub, "t", 1, start=99)
    seen: list[str] = []
    async with hub.session.ws_connect(f"{hub.url}/ws?topic=t&topic=u&since={since}") as ws:
        async with asyncio.timeout(20 * TIME_SCALE):
            while expected[-1] not in seen:
                message = await ws.receive_json()
                seen += [e["id"] for e in message["events"] if e["topic"] == "t"]
    assert seen == expected


async def test_a_lagging_sse_reader_of_several_topics_is_told_its_id_and_wait(hub: Hub) -> None:
    loop = asyncio.get_running_loop()
    port = int(hub.url.rsplit(":", 1)[1])
    await publish(hub, "u")
    storm = notification([{**c, "loc": c["loc"] + "/" + "z" * 150} for c in changes(10)])
    assert (await hub.publish("t", storm)).status == 202
    sock = _small_socket()
    try:
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await loop.sock_sendall(sock, b"GET /events?topic=t,u HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        await wait_for(lambda: _not_dropped(hub) == 1)
        # It reads nothing while the storm lasts: the hub drops it.
        async with asyncio.timeout(60 * TIME_SCALE):
            while _not_dropped(hub) > 0:
                assert (await hub.publish("t", storm)).status == 202
        body = b""
        async with asyncio.timeout(30 * TIME_SCALE):
            while chunk := await loop.sock_recv(sock, 65536):
                body += chunk
    finally:
        sock.close()
    assert body.startswith(b"HTTP/1.1 200 "), body[:200]
    endings = re.findall(rb"event: error\nretry: (\d+)\nid: (\S+)\ndata: ([^\n]*)\n\n", body)
    assert len(endings) == 1, body[-400:]
    (retry_text, id_bytes, data_bytes) = endings[0]
    assert body.endswith(data_bytes + b"\n\n\r\n0\r\n\r\n"), "the last event, then the end"
    retry, event_id, data = int(retry_text), id_bytes.decode(), data_bytes.decode()
    match = re.fullmatch(
        rf"{TOO_SLOW}; resume with Last-Event-ID: (\S+); retry after (\d+\.\d+) s", data
    )
    assert match, data
    assert match.group(1) == event_id
    assert abs(retry - float(match.group(2)) * 1000) <= 5  # ms, and words in centiseconds
    assert 0 <= float(match.group(2)) <= _SPREAD
