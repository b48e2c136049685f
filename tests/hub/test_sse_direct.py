"""SSE written directly by the feed's fan-out, under readers fast and slow.

A live SSE batch the connection can take is written to its transport by the feed, as one
shared HTTP chunk; one it cannot take queues for the sender task. These tests read the raw
bytes (chunk framing included) to check that both paths keep every event, in order, once;
that a client too slow for its buffer is still dropped with its resume point; and that an
HTTP/1.0 client (no chunked encoding) gets plain events.
"""

from __future__ import annotations

import asyncio
import re
import socket
from typing import Any

import pytest

from hub.web.streams import STREAMING
from tests.conftest import Hub
from tests.hub.test_dropped_clients import _warm_up
from tests.support import TIME_SCALE, changes, notification, wait_for
from tests.watchdog import Watchdog

_CAPACITY = 2000


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    # A dropped client gets 10 s to read its last event (it reads only after the drop).
    return {"heartbeat_seconds": 60, "client_buffer_events": _CAPACITY, "stream_close_seconds": 10}


class Reader:
    """The SSE text of a raw response, read incrementally (chunk framing checked)."""

    def __init__(self, sock: socket.socket, *, chunked: bool) -> None:
        self.sock, self.chunked = sock, chunked
        self.head: bytes | None = None
        self.pending = b""
        self.text = bytearray()
        self.ids: list[str] = []
        self._scanned = 0

    def _parse(self) -> None:
        if self.head is None:
            head, sep, rest = self.pending.partition(b"\r\n\r\n")
            if not sep:
                return
            self.head, self.pending = head, rest
        if not self.chunked:
            self.text += self.pending
            self.pending = b""
        while self.chunked:
            size_line, sep, rest = self.pending.partition(b"\r\n")
            if not sep:
                break
            size = int(size_line, 16)  # a malformed size line fails the test here
            if len(rest) < size + 2:
                break
            assert rest[size : size + 2] == b"\r\n", "a chunk must end with CRLF"
            self.text += rest[:size]
            self.pending = rest[size + 2 :]
        end = self.text.rfind(b"\n\n")  # complete events only
        if end >= self._scanned:
            block = bytes(self.text[self._scanned : end + 2])
            for event in block.split(b"\n\n"):
                # A stream's last event (error, shutdown) names its resume id too: the ids
                # of the changes are those of the events without a type.
                if not re.search(rb"^event:", event, re.M):
                    self.ids += [i.decode() for i in re.findall(rb"^id: (\S+)$", event, re.M)]
            self._scanned = end + 2

    async def until(self, want: int) -> list[str]:
        """Read until ``want`` event ids in all, an ``event: error`` or the end; the ids."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(30 * TIME_SCALE):
            while len(self.ids) < want and b"event: error" not in self.text:
                chunk = await loop.sock_recv(self.sock, 1 << 20)
                if not chunk:
                    break
                self.pending += chunk
                self._parse()
                await asyncio.sleep(0)  # sock_recv of ready data never yields to the loop
        return self.ids


async def _open(port: int, version: str = "1.1", since: str = "") -> socket.socket:
    """A raw SSE client with a small receive buffer; returns once the headers are in."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    extra = f"Last-Event-ID: {since}\r\n" if since else ""
    await loop.sock_sendall(
        sock,
        f"GET /topics/t/events HTTP/{version}\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode(),
    )
    return sock


def _sse_streams(hub: Hub) -> list[Any]:
    return list(hub.app[STREAMING].closing._streams)


async def _publish(hub: Hub, rounds: int, per: int, big: bool) -> list[str]:
    ids: list[str] = []
    for k in range(rounds):
        batch = changes(per, start=k * per)
        if big:  # fills a stalled client's socket buffers in a few batches
            batch = [{**c, "loc": c["loc"] + "/" + "z" * 4000} for c in batch]
        resp = await hub.publish("t", notification(batch))
        assert resp.status == 202
        ids += (await resp.json())["ids"]
    return ids


@pytest.mark.timeout(120)
async def test_a_stalled_reader_gets_every_event_once_in_order_through_both_paths(
    hub: Hub,
) -> None:
    port = int(hub.url.rsplit(":", 1)[1])
    await _warm_up(hub)  # what stays open on purpose (pooled connections) opens first
    async with Watchdog(stall_seconds=0.5) as dog:
        sock = await _open(port)
        try:
            await wait_for(lambda: any(s.live for s in _sse_streams(hub)))
            (stream,) = _sse_streams(hub)
            assert stream.writer is not None  # live SSE is written by the feed's fan-out
            taken = {True: 0, False: 0}
            direct = stream.writer

            def counting(events: list[Any]) -> bool:
                ok = direct(events)
                taken[ok] += 1
                return bool(ok)

            stream.writer = counting
            # Not reading: the first batches go straight to the transport until 64 KiB wait
            # there, the rest queue (fewer than the client's buffer of events: not dropped).
            ids: list[str] = []
            while not taken[False]:  # until the connection refuses one: bounded by capacity
                assert len(ids) < _CAPACITY - 100, taken
                ids += await _publish(hub, rounds=1, per=10, big=True)
            ids += await _publish(hub, rounds=3, per=10, big=True)  # these queue behind it
            assert taken[True] and taken[False], taken  # both paths were taken
            assert not stream.overflowed
            reader = Reader(sock, chunked=True)
            assert await reader.until(len(ids)) == ids  # once each, in order, either path
            assert b"event: error" not in reader.text
            # Caught up again: live batches go direct once more.
            accepted = taken[True]
            more = await _publish(hub, rounds=3, per=2, big=False)
            assert await reader.until(len(ids) + len(more)) == ids + more
            assert taken[True] == accepted + 3
        finally:
            sock.close()
        # The hub learns of a client gone away when it next writes to it.
        async with asyncio.timeout(30 * TIME_SCALE):
            while _sse_streams(hub):
                await _publish(hub, rounds=1, per=1, big=False)
                await asyncio.sleep(0.05)
    await dog.sockets_back()


@pytest.mark.timeout(120)
async def test_a_reader_too_slow_for_its_buffer_is_dropped_and_resumes_without_loss(
    hub: Hub,
) -> None:
    port = int(hub.url.rsplit(":", 1)[1])
    async with Watchdog(stall_seconds=0.5):
        sock = await _open(port)
        try:
            await wait_for(lambda: any(s.live for s in _sse_streams(hub)))
            ids: list[str] = []
            async with asyncio.timeout(60 * TIME_SCALE):
                while _sse_streams(hub):  # until dropped as too slow
                    ids += await _publish(hub, rounds=1, per=50, big=True)
            reader = Reader(sock, chunked=True)
            got = list(await reader.until(len(ids)))
            text = bytes(reader.text)
        finally:
            sock.close()
    match = re.search(
        rb"event: error\nretry: (\d+)\nid: (\S+)\n"
        rb"data: too slow; resume with Last-Event-ID: \2; retry after (\d+\.\d\d) s\n",
        text,
    )
    assert match, text[-300:]
    resume = match.group(2).decode()
    # The wait, in the field a browser waits by and in the words our clients read, agree.
    assert abs(int(match.group(1)) - float(match.group(3)) * 1000) <= 5, match.group(0)
    assert got == ids[: len(got)] and len(got) < len(ids)  # in order, then cut off
    # The resume point is an event it received (at most the last: a batch written while
    # the drop came may arrive again, never go missing); resuming from it gives the rest.
    assert resume in got
    seen = got[: got.index(resume) + 1]
    sock = await _open(port, since=resume)
    try:
        rest = await Reader(sock, chunked=True).until(len(ids) - len(seen))
    finally:
        sock.close()
    assert seen + rest == ids


async def test_an_http10_reader_gets_plain_events_written_directly(hub: Hub) -> None:
    port = int(hub.url.rsplit(":", 1)[1])
    sock = await _open(port, version="1.0")
    try:
        await wait_for(lambda: any(s.live for s in _sse_streams(hub)))
        assert _sse_streams(hub)[0].writer is not None
        ids = await _publish(hub, rounds=3, per=2, big=False)
        reader = Reader(sock, chunked=False)
        assert await reader.until(len(ids)) == ids
        assert reader.head is not None and b"Transfer-Encoding" not in reader.head
        assert reader.text.startswith(b"retry: 1000\n\nid: ")  # no chunk-size lines
    finally:
        sock.close()


async def test_headers_go_out_with_the_first_bytes_and_head_gets_no_body(hub: Hub) -> None:
    port = int(hub.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"GET /topics/t/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        async with asyncio.timeout(10 * TIME_SCALE):
            # One write carries the head and the first chunk: a single read returns both.
            first = await reader.read(65536)
        assert first.startswith(b"HTTP/1.1 200") and first.endswith(b"\r\nretry: 1000\n\n\r\n")
    finally:
        writer.close()
    async with hub.session.head(f"{hub.url}/topics/t/events") as head:
        assert head.status == 200 and head.headers["Content-Type"] == "text/event-stream"
        assert await head.read() == b""
