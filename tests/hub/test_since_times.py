"""``since=`` as an ISO 8601 time (Wikimedia EventStreams' convention): the events the hub
received at or after it, on every way a resume point comes in (``/topics/{name}/events``
and ``/ws``, SSE's ``Last-Event-ID``, WebSub's ``hub.since``; streams of several topics:
tests/hub/test_multiplex.py). A malformed time is a 400 naming the parameter; a time
before what retention kept is a 410, as an id is.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_streams import sse_collect, ws_collect
from tests.hub.test_websub import subscribe
from tests.support import changes, notification, wait_for


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def _two_halves(hub: Hub, topic: str = "t") -> tuple[list[str], str, list[str]]:
    """Ids published before a moment, the moment, and ids published after it."""
    resp = await hub.publish(topic, notification(changes(3)))
    early = (await resp.json())["ids"]
    await asyncio.sleep(0.01)  # a millisecond boundary either side of the moment
    moment = _iso(datetime.now(UTC))
    await asyncio.sleep(0.01)
    resp = await hub.publish(topic, notification(changes(2, start=5)))
    late = (await resp.json())["ids"]
    return early, moment, late


async def test_sse_and_websocket_since_a_time(hub: Hub) -> None:
    early, moment, late = await _two_halves(hub)
    assert int(early[-1].split("-")[0]) < int(late[0].split("-")[0])
    async with hub.session.get(f"{hub.url}/topics/t/events?since={moment}") as resp:
        assert [e["id"] for e in await sse_collect(resp, 2)] == late
    headers = {"Last-Event-ID": moment}
    async with hub.session.get(f"{hub.url}/topics/t/events", headers=headers) as resp:
        assert [e["id"] for e in await sse_collect(resp, 2)] == late
    async with hub.session.ws_connect(f"{hub.url}/topics/t/ws?since={moment}") as ws:
        assert [e["id"] for e in await ws_collect(ws, 2)] == late
    # A zone other than Z, and a time before everything: all that is retained.
    offset = datetime.fromisoformat(moment.replace("Z", "+00:00")).astimezone(
        timezone(timedelta(hours=5))
    )
    shifted = offset.isoformat(timespec="milliseconds").replace("+", "%2B")
    async with hub.session.ws_connect(f"{hub.url}/topics/t/ws?since={shifted}") as ws:
        assert [e["id"] for e in await ws_collect(ws, 2)] == late
    async with hub.session.ws_connect(f"{hub.url}/topics/t/ws?since=1999-01-01T00:00Z") as ws:
        assert [e["id"] for e in await ws_collect(ws, 5)] == early + late


async def test_a_time_ahead_waits_for_what_comes_after_it(hub: Hub) -> None:
    await hub.publish("t", notification(changes(1)))
    ahead = _iso(datetime.now(UTC) + timedelta(seconds=0.3))
    async with hub.session.ws_connect(f"{hub.url}/topics/t/ws?since={ahead}") as ws:
        await asyncio.sleep(0.5)
        ids = (await (await hub.publish("t", notification(changes(1, start=3)))).json())["ids"]
        assert [e["id"] for e in await ws_collect(ws, 1)] == ids


@pytest.mark.parametrize(
    "bad", ["2026-11-22T10:00:00", "2026-11-22", "2026-02-30T00:00:00Z", "2026-11-22T10:00:00+0100"]
)
async def test_a_malformed_time_is_400_naming_the_parameter(hub: Hub, bad: str) -> None:
    await hub.publish("t", notification(changes(1)))
    for url, headers, named in [
        (f"{hub.url}/topics/t/events?since={bad}", {}, "since"),
        (f"{hub.url}/topics/t/ws?since={bad}", {}, "since"),
        (f"{hub.url}/topics/t/events", {"Last-Event-ID": bad}, "Last-Event-ID"),
    ]:
        async with hub.session.get(url, headers=headers) as resp:
            assert resp.status == 400, (url, headers)
            error = (await resp.json())["error"]
            assert f"invalid event id or time in {named}" in error and "ISO 8601" in error
    form = {
        "hub.mode": "subscribe",
        "hub.topic": f"{hub.url}/topics/t",
        "hub.callback": "http://callback.invalid/",
        "hub.since": bad,
    }
    async with hub.session.post(hub.url + "/", data=form) as resp:
        assert resp.status == 400
        assert "invalid event id or time in hub.since" in (await resp.json())["error"]


class TestRetention:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"topic_retention_max_events": {"t": 3}}

    async def test_a_time_before_what_is_retained_is_410(self, hub: Hub) -> None:
        early, moment, late = await _two_halves(hub)  # 5 events, the first 2 trimmed
        async with hub.session.get(f"{hub.url}/topics/t/events?since=2000-01-01T00:00Z") as resp:
            assert resp.status == 410
            answer = await resp.json()
            assert "at or after 2000-01-01T00:00Z" in answer["error"]
            assert answer["trimmed_through"] == early[1]
        async with hub.session.ws_connect(f"{hub.url}/topics/t/ws?since={moment}") as ws:
            assert [e["id"] for e in await ws_collect(ws, 2)] == late


@pytest.fixture
async def callback() -> AsyncIterator[CallbackServer]:
    server = await CallbackServer().start()
    yield server
    await server.stop()


async def test_websub_hub_since_a_time(hub: Hub, callback: CallbackServer) -> None:
    early, moment, late = await _two_halves(hub)
    await subscribe(hub, callback, **{"hub.since": moment})
    await wait_for(lambda: len(callback.ids) >= 2)
    assert callback.ids == late
    assert not set(early) & set(callback.ids)
