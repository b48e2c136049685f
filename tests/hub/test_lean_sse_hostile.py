"""Hostile first requests at the lean SSE path's parser (hub.web.lean_connection.LeanConnection).

Every accepted connection's first bytes now go through llhttp before aiohttp sees them:
named cases (pipelining, a request a byte at a time, oversized headers, bad methods and
versions, garbage, a half-closed peer, headers that never end) and a seeded fuzz of
mutated subscribe requests, under the watchdog: no loop stall, no ERROR log, no leaked
socket, and every answer a 4xx or an SSE stream.
"""

from __future__ import annotations

import asyncio
import random
import re
import socket
import time
from typing import Any

import pytest

from hub.web.lean_sse import LeanStream
from hub.web.streams import STREAMING
from tests.conftest import Hub
from tests.hub.request_mutations import mutate, send_in_pieces
from tests.support import TIME_SCALE, changes, notification, wait_for
from tests.watchdog import Watchdog

_SUBSCRIBE = (
    b"GET /topics/t/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"
)
_HEADER_TIMEOUT = 1.0


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"header_timeout_seconds": _HEADER_TIMEOUT, "heartbeat_seconds": 60}


def _port(hub: Hub) -> int:
    return int(hub.url.rsplit(":", 1)[1])


def _streams(hub: Hub) -> list[Any]:
    return list(hub.app[STREAMING].closing._streams)


def _lean(stream: Any) -> bool:
    return isinstance(getattr(stream.writer, "__self__", None), LeanStream)


async def _warm_up(hub: Hub) -> None:
    """Open what stays open on purpose (the publishing session's pooled connection, the
    hub's Redis connections for following the topic) before the sockets are counted."""
    reader, writer = await asyncio.open_connection("127.0.0.1", _port(hub))
    writer.write(_SUBSCRIBE)
    await reader.readuntil(b"\r\n\r\n")
    assert (await hub.publish("t", notification(changes(1)))).status == 202
    writer.close()
    await wait_for(lambda: not _streams(hub))


async def _no_streams_left(hub: Hub) -> None:
    """aiohttp's path learns that a client left when it next writes to it: publish until
    every stream has ended (the lean path learns at once)."""
    async with asyncio.timeout(30 * TIME_SCALE):
        while streams := _streams(hub):
            for topic in {s.feed.topic for s in streams}:
                resp = await hub.publish(topic, notification(changes(1)))
                assert resp.status == 202
            await asyncio.sleep(0.05)


async def _answer(hub: Hub, data: bytes, *, pieces: int = 1) -> tuple[bytes, float]:
    """What the hub answers ``data`` (sent in ``pieces``): its head (b"" if it closed
    without one), and how long that took."""
    reader, writer = await asyncio.open_connection("127.0.0.1", _port(hub))
    started = time.monotonic()
    try:
        await send_in_pieces(writer, data, pieces)
        async with asyncio.timeout(10 * TIME_SCALE):
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                head = exc.partial
            except ConnectionResetError:
                head = b""
        return head, time.monotonic() - started
    finally:
        writer.close()


def _status(head: bytes) -> int:
    # aiohttp answers a parse error in HTTP/1.0, a request it read as 0.9 in 0.9
    match = re.match(rb"HTTP/\d\.\d (\d{3}) ", head)
    assert match, head[:200]
    return int(match[1])


async def test_named_hostile_first_requests(hub: Hub) -> None:
    await _warm_up(hub)
    async with Watchdog() as dog:
        # A second request pipelined behind the subscribe: aiohttp's path takes both (it
        # streams the first; the second waits behind the stream, as before).
        head, _ = await _answer(hub, _SUBSCRIBE + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert _status(head) == 200 and b"text/event-stream" in head
        # A byte at a time: still a plain subscribe, served lean.
        head, _ = await _answer(hub, _SUBSCRIBE, pieces=len(_SUBSCRIBE))
        assert _status(head) == 200 and b"text/event-stream" in head
        # Oversized headers, bad methods and versions, garbage: aiohttp's 4xx, as before.
        big = _SUBSCRIBE[:-2] + b"X-Big: " + b"a" * 20000 + b"\r\n\r\n"
        cases = {
            "oversized header": big,
            "many headers": _SUBSCRIBE[:-2] + b"X-A: b\r\n" * 2000 + b"\r\n",
            "bad method": _SUBSCRIBE.replace(b"GET", b"G\x01T", 1),
            "unknown method": _SUBSCRIBE.replace(b"GET", b"FROB", 1),
            "bad version": _SUBSCRIBE.replace(b"HTTP/1.1", b"HTTP/7.x", 1),
            "garbage": bytes(range(256)) * 4,
            "NUL in a header": _SUBSCRIBE.replace(b"Host: ", b"Host: \x00", 1),
            "no Host twice": _SUBSCRIBE[:-2] + b"Host: other\r\n\r\n",
        }
        for name, data in cases.items():
            head, _ = await _answer(hub, data)
            assert 400 <= _status(head) < 500, (name, head[:200])
        # Headers that never end: closed at the header deadline, unanswered.
        head, took = await _answer(hub, _SUBSCRIBE[:-2])
        assert head == b""
        assert _HEADER_TIMEOUT * 0.9 <= took <= (_HEADER_TIMEOUT + 5) * TIME_SCALE
        await _no_streams_left(hub)
    await dog.sockets_back()


async def test_a_half_closed_subscriber_ends_its_stream(hub: Hub) -> None:
    await _warm_up(hub)
    async with Watchdog() as dog:
        sock = socket.create_connection(("127.0.0.1", _port(hub)))
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        try:
            await loop.sock_sendall(sock, _SUBSCRIBE)
            await wait_for(lambda: len(_streams(hub)) == 1)
            assert _lean(_streams(hub)[0])
            sock.shutdown(socket.SHUT_WR)  # as aiohttp: a peer that half-closes has left
            await wait_for(lambda: not _streams(hub))
            assert hub.app[STREAMING].presence.snapshot() == {}
            received = b""
            async with asyncio.timeout(10 * TIME_SCALE):
                while chunk := await loop.sock_recv(sock, 65536):
                    received += chunk
            assert received.startswith(b"HTTP/1.1 200 OK\r\n")
        finally:
            sock.close()
    await dog.sockets_back()


def _mutate(rng: random.Random, data: bytes) -> bytes:
    out = mutate(
        rng,
        data,
        chars=b" :\r\n\t/%?\x00\x7fGETHTP1.",
        headers=[b"Authorization: x\r\n", b"Content-Length: 5\r\n", b"Upgrade: websocket\r\n"],
        splice=20,
    )
    if not out.endswith(b"\r\n\r\n") and rng.random() < 0.8:
        out += b"\r\n\r\n"  # most cases end their headers: answered, not timed out
    return out


@pytest.mark.timeout(300)
async def test_a_seeded_fuzz_of_first_requests(hub: Hub) -> None:
    await _warm_up(hub)
    rng = random.Random(22)
    seen: dict[str, int] = {}
    async with Watchdog() as dog:
        for batch in range(10):
            cases = [_mutate(rng, _SUBSCRIBE) for _ in range(30)]
            answers = await asyncio.gather(*(_answer(hub, c) for c in cases))
            for case, (head, _took) in zip(cases, answers, strict=True):
                if not head:  # headers never ended (or the body never came): the deadline
                    seen["closed"] = seen.get("closed", 0) + 1
                    continue
                status = _status(head)
                if status == 200:
                    assert b"Content-Type: text/event-stream" in head, (case, head)
                else:
                    assert 400 <= status < 500, (batch, case, head)
                seen[str(status)] = seen.get(str(status), 0) + 1
        await _no_streams_left(hub)
    assert seen.get("200", 0) > 10 and sum(v for k, v in seen.items() if k[0] == "4") > 100, seen
    await dog.sockets_back()
