"""WebSocket and SSE streams: replay, live, resume, heartbeats, slow consumers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from tests.conftest import Hub
from tests.support import TIME_SCALE, changes, notification, wait_for


async def ws_collect(ws: aiohttp.ClientWebSocketResponse, n: int, timeout: float = 10) -> list:
    events: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while len(events) < n:
            msg = await ws.receive()
            assert msg.type == aiohttp.WSMsgType.TEXT, msg
            batch = json.loads(msg.data)
            assert isinstance(batch, list) and batch
            events.extend(batch)
    return events


async def sse_collect(resp: aiohttp.ClientResponse, n: int, timeout: float = 10) -> list:
    events: list[dict[str, Any]] = []
    event_id = None
    async with asyncio.timeout(timeout):
        while len(events) < n:
            line = (await resp.content.readline()).decode().rstrip("\n")
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("data: "):
                event = json.loads(line[6:])
                assert event["id"] == event_id
                events.append(event)
    return events


async def test_websocket_replays_then_follows_live(hub: Hub) -> None:
    old = (await (await hub.publish("t", notification(changes(3)))).json())["ids"]
    async with hub.session.ws_connect(f"{hub.url}/topics/t/ws?since=0") as ws:
        replayed = await ws_collect(ws, 3)
        assert [e["id"] for e in replayed] == old
        assert replayed[0] == {
            "id": old[0],
            "topic": "t",
            "loc": "http://example.org/r0",
            "lastmod": "2026-01-01T00:00:00Z",
            "change": "updated",
        }
        new = (await (await hub.publish("t", notification(changes(2, start=3)))).json())["ids"]
        live = await ws_collect(ws, 2)
        assert [e["id"] for e in live] == new


async def test_websocket_without_since_starts_live(hub: Hub) -> None:
    await hub.publish("t", notification(changes(3)))
    async with hub.session.ws_connect(f"{hub.url}/topics/t/ws") as ws:
        await wait_for(lambda: _feed_consumers(hub, "t") >= 1)
        new = (await (await hub.publish("t", notification(changes(1, start=9)))).json())["ids"]
        assert [e["id"] for e in await ws_collect(ws, 1)] == new


def _feed_consumers(hub: Hub, topic: str) -> int:
    from hub.web.app import RUNTIME

    feed = hub.app[RUNTIME].feeds._feeds.get(topic)
    return feed.consumers if feed else 0


async def test_websocket_resume_from_id_has_no_gap(hub: Hub) -> None:
    ids = (await (await hub.publish("t", notification(changes(10)))).json())["ids"]
    async with hub.session.ws_connect(f"{hub.url}/topics/t/ws?since={ids[3]}") as ws:
        assert [e["id"] for e in await ws_collect(ws, 6)] == ids[4:]


async def test_sse_replays_with_last_event_id_then_live(hub: Hub) -> None:
    ids = (await (await hub.publish("t", notification(changes(4)))).json())["ids"]
    async with hub.session.get(
        f"{hub.url}/topics/t/events", headers={"Last-Event-ID": ids[0]}
    ) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        assert [e["id"] for e in await sse_collect(resp, 3)] == ids[1:]
        more = (await (await hub.publish("t", notification(changes(2, start=4)))).json())["ids"]
        assert [e["id"] for e in await sse_collect(resp, 2)] == more


async def test_bad_since_is_400(hub: Hub) -> None:
    resp = await hub.session.get(f"{hub.url}/topics/t/events?since=yesterday")
    assert resp.status == 400
    assert "event id" in (await resp.json())["error"]


class TestHeartbeats:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"heartbeat_seconds": 0.2}

    async def test_sse_heartbeat(self, hub: Hub) -> None:
        async with hub.session.get(f"{hub.url}/topics/t/events") as resp:
            async with asyncio.timeout(5):
                while (await resp.content.readline()) != b": heartbeat\n":
                    pass

    async def test_sse_heartbeats_on_aiohttp_s_path_too(self, hub: Hub) -> None:
        # A query (a filter) is not a plain subscribe: aiohttp's path serves it. Its body
        # opens with the reconnection time, then heartbeats while idle.
        async with hub.session.get(f"{hub.url}/topics/t/events?change=updated") as resp:
            lines: list[bytes] = []
            async with asyncio.timeout(5 * TIME_SCALE):
                while lines.count(b": heartbeat\n") < 2:
                    lines.append(await resp.content.readline())
            assert lines[:2] == [b"retry: 1000\n", b"\n"]
            assert set(lines[2:]) == {b": heartbeat\n", b"\n"}


class TestSlowConsumers:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"heartbeat_seconds": 5, "client_buffer_events": 50}

    async def test_slow_websocket_client_is_dropped_and_resumes_without_gap(self, hub: Hub) -> None:
        # A client that stops reading: its socket buffers fill, then its queue overflows.
        ids: list[str] = []
        async with hub.session.ws_connect(f"{hub.url}/topics/t/ws") as ws:
            await wait_for(lambda: _feed_consumers(hub, "t") >= 1)
            big = [{**c, "loc": c["loc"] + "/" + "x" * 2000} for c in changes(100)]
            closed = None
            async with asyncio.timeout(30):
                while closed is None:
                    body = await (await hub.publish("t", notification(big))).json()
                    ids += body["ids"]
                    if ws.closed or ws._reader.is_eof():
                        break
                    if len(ids) > 20_000:
                        break
                    closed = await _closed_soon(hub, "t")
            received: list[str] = []
            close_reason = ""
            async with asyncio.timeout(20):
                while True:
                    msg = await ws.receive()
                    if msg.type == aiohttp.WSMsgType.TEXT:
                        received += [e["id"] for e in json.loads(msg.data)]
                    else:
                        assert ws.close_code == 1013
                        close_reason = str(msg.extra or "")
                        break
            assert "too slow" in close_reason
        assert received == ids[: len(received)]
        resume = received[-1] if received else "0"
        async with hub.session.ws_connect(f"{hub.url}/topics/t/ws?since={resume}") as ws2:
            rest = await ws_collect(ws2, len(ids) - len(received), timeout=20)
        assert received + [e["id"] for e in rest] == ids


async def _closed_soon(hub: Hub, topic: str) -> bool | None:
    return True if _feed_consumers(hub, topic) == 0 else None


async def test_sse_last_event_id_wins_over_since(hub: Hub) -> None:
    # A browser EventSource reconnects to the same URL (with ?since=) and adds the header.
    ids = (await (await hub.publish("t", notification(changes(4)))).json())["ids"]
    async with hub.session.get(
        f"{hub.url}/topics/t/events?since=0", headers={"Last-Event-ID": ids[2]}
    ) as resp:
        assert [e["id"] for e in await sse_collect(resp, 1)] == ids[3:]


class TestStalledClient:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"heartbeat_seconds": 0.5, "client_buffer_events": 50}

    async def test_client_that_reads_nothing_is_cut_off(self, hub: Hub) -> None:
        """A peer that completes the handshake and then never reads must not pin the
        hub's memory or its sender: it is dropped within a few heartbeats."""
        port = int(hub.url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"GET /topics/t/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            b"Sec-WebSocket-Version: 13\r\n\r\n"
        )
        await writer.drain()
        assert b"101" in await reader.readline()
        try:
            await wait_for(lambda: _feed_consumers(hub, "t") >= 1)
            big = [{**c, "loc": c["loc"] + "/" + "z" * 4000} for c in changes(100)]
            async with asyncio.timeout(30):
                while _feed_consumers(hub, "t") > 0:
                    await hub.publish("t", notification(big))
            assert (await hub.session.get(f"{hub.url}/healthz")).status == 200
        finally:
            writer.transport.abort()


async def test_filters_by_change_type_and_prefix(hub: Hub) -> None:
    mixed = [
        {"loc": "http://a.example/1", "change": "created"},
        {"loc": "http://b.example/2", "change": "updated"},
        {"loc": "http://a.example/3", "change": "deleted"},
        {"loc": "http://a.example/4", "change": "updated"},
    ]
    ids = (await (await hub.publish("t", notification(mixed))).json())["ids"]
    url = f"{hub.url}/topics/t/ws?since=0&change=created,updated&prefix=http://a.example/"
    async with hub.session.ws_connect(url) as ws:
        got = await ws_collect(ws, 2)
        assert [e["id"] for e in got] == [ids[0], ids[3]]
        live = (
            await (
                await hub.publish(
                    "t",
                    notification(
                        [
                            {"loc": "http://b.example/5", "change": "created"},
                            {"loc": "http://a.example/6", "change": "created"},
                        ]
                    ),
                )
            ).json()
        )["ids"]
        assert [e["id"] for e in await ws_collect(ws, 1)] == live[1:]
    async with hub.session.get(f"{hub.url}/topics/t/events?since=0&change=deleted") as resp:
        assert [e["id"] for e in await sse_collect(resp, 1)] == [ids[2]]


async def test_bad_filter_is_400(hub: Hub) -> None:
    resp = await hub.session.get(f"{hub.url}/topics/t/events?change=exploded")
    assert resp.status == 400
    assert "change filter" in (await resp.json())["error"]
