"""The lean SSE path (hub.web.lean_sse): a plain subscribe served without aiohttp's
per-request machinery, with aiohttp's bytes and the same stream semantics; everything else
handed to aiohttp.

Raw sockets throughout: the head is compared byte for byte with aiohttp's (a header the
lean path does not take, ``DNT``, sends the same request through aiohttp).
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import pytest

from hub.core import metrics
from hub.core.log_format import ACCESS_LOGGER
from hub.web.lean_sse import LeanStream
from hub.web.streams import STREAMING
from tests.conftest import Hub
from tests.support import TIME_SCALE, changes, notification, wait_for


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"heartbeat_seconds": 0.3, "topic_read_tokens": {"secret": ["r1"]}}


def _port(hub: Hub) -> int:
    return int(hub.url.rsplit(":", 1)[1])


class Raw:
    """A raw HTTP/1.1 client; reads a chunked SSE body as text."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.text = b""

    @classmethod
    async def get(cls, hub: Hub, path: str = "/topics/t/events", extra: str = "") -> Raw:
        reader, writer = await asyncio.open_connection("127.0.0.1", _port(hub))
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode())
        return cls(reader, writer)

    async def head(self) -> bytes:
        async with asyncio.timeout(10 * TIME_SCALE):
            return await self.reader.readuntil(b"\r\n\r\n")

    async def chunk(self) -> bytes | None:
        """The next chunk's payload; None at the last chunk."""
        async with asyncio.timeout(10 * TIME_SCALE):
            size = int(await self.reader.readuntil(b"\r\n"), 16)
            data = await self.reader.readexactly(size + 2)
        assert data.endswith(b"\r\n")
        if size == 0:
            return None
        self.text += data[:-2]
        return data[:-2]

    async def until(self, marker: bytes) -> bytes:
        while marker not in self.text:
            if await self.chunk() is None:
                raise AssertionError(f"the stream ended without {marker!r}: {self.text!r}")
        return self.text

    async def ended(self) -> None:
        """Reads to the last chunk, then the end of the connection."""
        while await self.chunk() is not None:
            pass
        async with asyncio.timeout(10 * TIME_SCALE):
            assert await self.reader.read() == b""

    def close(self) -> None:
        self.writer.close()


def _streams(hub: Hub) -> list[Any]:
    return list(hub.app[STREAMING].closing._streams)


def _lean(stream: Any) -> bool:
    return isinstance(getattr(stream.writer, "__self__", None), LeanStream)


def _normal(head: bytes) -> bytes:
    head = re.sub(rb"\r\nDate: [^\r]*", b"\r\nDate: -", head)
    return re.sub(rb"\r\nX-Request-Id: [0-9a-f]{16}\r\n", b"\r\nX-Request-Id: -\r\n", head)


async def test_a_plain_subscribe_is_served_lean_with_aiohttps_very_bytes(hub: Hub) -> None:
    lean = await Raw.get(hub)
    await wait_for(lambda: len(_streams(hub)) == 1)
    lean_head, lean_first = await lean.head(), await lean.chunk()
    via_aiohttp = await Raw.get(hub, extra="DNT: 1\r\n")
    await wait_for(lambda: len(_streams(hub)) == 2)
    head, first = await via_aiohttp.head(), await via_aiohttp.chunk()
    try:
        assert sorted(_lean(s) for s in _streams(hub)) == [False, True]
        assert lean_head.startswith(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n")
        assert _normal(lean_head) == _normal(head), (lean_head, head)
        assert b"X-Request-Id: " in lean_head and b"Transfer-Encoding: chunked" in lean_head
        assert lean_first == first == b"retry: 1000\n\n"
        # Both get the same live events, as the same chunks.
        resp = await hub.publish("t", notification(changes(2)))
        ids = (await resp.json())["ids"]
        for client in (lean, via_aiohttp):
            text = await client.until(f"id: {ids[-1]}\n".encode())
            assert re.findall(rb"^id: (\S+)$", text, re.M) == [i.encode() for i in ids]
        assert lean.text.replace(b": heartbeat\n\n", b"") == via_aiohttp.text.replace(
            b": heartbeat\n\n", b""
        )
    finally:
        lean.close()
        via_aiohttp.close()
    await wait_for(lambda: not _streams(hub))


async def test_heartbeats_and_a_deleted_topic_on_the_lean_path(hub: Hub) -> None:
    client = await Raw.get(hub)
    await client.head()
    try:
        await wait_for(lambda: len(_streams(hub)) == 1)
        assert _lean(_streams(hub)[0])
        presence = hub.app[STREAMING].presence
        assert presence.snapshot() == {("t", "sse"): 1}
        await client.until(b": heartbeat\n\n")  # after 0.3 s of nothing
        await hub.app[STREAMING].feeds.end("t")
        assert (await client.until(b"event: deleted\n")).endswith(b"event: deleted\ndata: t\n\n")
        await client.ended()
        await wait_for(lambda: not _streams(hub) and not presence.snapshot())
    finally:
        client.close()


async def test_shutdown_ends_a_lean_stream_with_its_resume_point(hub: Hub) -> None:
    client = await Raw.get(hub)
    await client.head()
    try:
        await wait_for(lambda: len(_streams(hub)) == 1 and _lean(_streams(hub)[0]))
        ids = (await (await hub.publish("t", notification(changes(1)))).json())["ids"]
        await client.until(f"id: {ids[0]}\n".encode())
        await hub.app[STREAMING].closing.close_all(5)
        text = await client.until(b"event: shutdown")
        assert text.endswith(
            f"event: shutdown\nretry: 100\nid: {ids[0]}\n"
            f"data: shutdown; resume with Last-Event-ID: {ids[0]}\n\n".encode()
        )
        await client.ended()
        assert not _streams(hub)
    finally:
        client.close()


@pytest.mark.parametrize(
    ("path", "extra", "status", "says"),
    [
        ("/topics/secret/events", "", 401, "private"),
        ("/topics/secret/events", "Authorization: Bearer nope\r\n", 403, ""),
        ("/topics/t/events", "Last-Event-ID: 99999999999999-0\r\n", 400, "beyond the last"),
        ("/topics/t/events?since=x", "", 400, "invalid event id"),
        ("/topics/bad%20name/events", "", 400, "topic"),
    ],
)
async def test_what_the_lean_path_declines_is_answered_by_aiohttp(
    hub: Hub, path: str, extra: str, status: int, says: str
) -> None:
    client = await Raw.get(hub, path, extra)
    try:
        head = await client.head()
        assert head.startswith(f"HTTP/1.1 {status} ".encode()), head
        length = int(re.search(rb"Content-Length: (\d+)", head)[1])  # type: ignore[index]
        body = await client.reader.readexactly(length)
        assert says.encode() in body and b'"error"' in body
        assert b"X-Request-Id: " in head
    finally:
        client.close()


async def test_a_private_topic_with_its_token_is_streamed_by_aiohttp(hub: Hub) -> None:
    client = await Raw.get(hub, "/topics/secret/events", "Authorization: Bearer r1\r\n")
    try:
        head = await client.head()
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"private, no-cache" in head
        await wait_for(lambda: len(_streams(hub)) == 1)
        assert not _lean(_streams(hub)[0])
    finally:
        client.close()


class TestCap:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"max_connections": 3}

    async def test_lean_streams_count_against_max_connections(self, hub: Hub) -> None:
        clients = [await Raw.get(hub) for _ in range(3)]
        try:
            for client in clients:
                await client.head()
            await wait_for(lambda: len(_streams(hub)) == 3)
            assert all(_lean(s) for s in _streams(hub))
            over = await Raw.get(hub)
            assert (await over.head()).startswith(b"HTTP/1.1 503 ")
            over.close()
            clients.pop().close()
            await wait_for(lambda: len(_streams(hub)) == 2)
            again = await Raw.get(hub)
            clients.append(again)
            assert (await again.head()).startswith(b"HTTP/1.1 200 OK")
        finally:
            for client in clients:
                client.close()


class TestOff:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"lean_sse": False}

    async def test_with_lean_sse_off_aiohttp_serves_every_stream(self, hub: Hub) -> None:
        client = await Raw.get(hub)
        try:
            assert (await client.head()).startswith(b"HTTP/1.1 200 OK")
            await wait_for(lambda: len(_streams(hub)) == 1)
            assert not _lean(_streams(hub)[0])
        finally:
            client.close()


class TestAccessLog:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"access_log": True}

    async def test_a_lean_stream_is_logged_and_timed_as_aiohttps(
        self, hub: Hub, caplog: pytest.LogCaptureFixture
    ) -> None:
        caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
        timed = metrics.HTTP_SECONDS.labels("GET", "/topics/{name}/events", "200")
        before = _observed(timed)
        for extra in ("", "DNT: 1\r\n"):  # lean, then aiohttp
            client = await Raw.get(hub, extra=extra)
            await client.head()
            await wait_for(lambda: len(_streams(hub)) == 1)
            assert _lean(_streams(hub)[0]) is not bool(extra)
            client.close()
            await hub.publish("t", notification(changes(1)))  # aiohttp's path learns by it
            await wait_for(lambda: not _streams(hub))

        def logged() -> list[dict[str, Any]]:
            return [
                {k: getattr(r, k) for k in ("method", "route", "path", "status", "remote")}
                for r in caplog.records
                if r.name == ACCESS_LOGGER and r.method == "GET"
            ]

        await wait_for(lambda: len(logged()) == 2)
        lean, via_aiohttp = logged()
        assert lean == via_aiohttp
        assert lean["path"] == "/topics/t/events" and lean["status"] == 200
        assert _observed(timed) == before + 2


def _observed(histogram: Any) -> float:
    return next(s.value for s in histogram.collect()[0].samples if s.name.endswith("_count"))
