"""Retention: per-topic bounds, trimming of quiet topics, explicit gap answers."""

from __future__ import annotations

from typing import Any

import pytest

from hub.web.app import RUNTIME
from tests.conftest import Hub
from tests.support import changes, notification, wait_for


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {
        "retention_max_events": 0,
        "topic_retention_max_events": {"short": 5},
        "topic_retention_seconds": {"quiet": 1},
        "retention_sweep_seconds": 0.1,
    }


async def test_length_retention_is_per_topic(hub: Hub) -> None:
    ids = (await (await hub.publish("short", notification(changes(8)))).json())["ids"]
    await hub.publish("long", notification(changes(8)))
    store = hub.app[RUNTIME].store
    assert await store.length("short") == 5
    assert await store.length("long") == 8
    assert await store.first_id("short") == ids[3]
    assert await store.trimmed_through("short") == ids[2]
    assert await store.trimmed_through("long") is None


async def test_quiet_topic_is_trimmed_by_age(hub: Hub) -> None:
    await hub.publish("quiet", notification(changes(3)))
    store = hub.app[RUNTIME].store

    async def emptied() -> bool:
        return await store.length("quiet") == 0

    await wait_for(emptied, timeout=10)
    assert await store.trimmed_through("quiet") is not None


@pytest.mark.parametrize("path", ["ws", "events"])
async def test_resuming_from_a_trimmed_id_is_410_naming_the_gap(hub: Hub, path: str) -> None:
    ids = (await (await hub.publish("short", notification(changes(8)))).json())["ids"]
    resp = await hub.session.get(f"{hub.url}/topics/short/{path}?since={ids[0]}")
    assert resp.status == 410
    body = await resp.json()
    assert body["trimmed_through"] == ids[2]
    assert body["resourcelist"].endswith("/topics/short/resourcelist.xml")
    # From the last trimmed id onwards nothing is missing: no gap, the stream opens.
    async with hub.session.ws_connect(f"{hub.url}/topics/short/ws?since={ids[2]}") as ws:
        msg = await ws.receive_json(timeout=10)
        assert [e["id"] for e in msg] == ids[3:]
