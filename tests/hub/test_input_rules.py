"""Input rules: absolute http(s) locs only; resume points must lie within the stream."""

from __future__ import annotations

import pytest

from hub.store import keys
from tests.conftest import Hub
from tests.support import changes, notification


@pytest.mark.parametrize(
    "loc", ["/rel/path", "notaurl", "ftp://example.org/x", "http://", "mailto:a@example.org"]
)
async def test_a_loc_that_is_not_an_absolute_http_url_is_refused(hub: Hub, loc: str) -> None:
    body = notification([{"loc": "http://example.org/ok"}, {"loc": loc}])
    resp = await hub.publish("t", body)
    assert resp.status == 400
    answer = await resp.json()
    assert "entry 1: loc must be an absolute http(s) URL" in answer["error"]
    assert answer["rule"] == "entry.loc-absolute-http" and answer["index"] == 1
    assert await hub.redis.exists(keys.events("t"), keys.resources("t")) == 0


@pytest.mark.parametrize(
    "loc", ["http://example.org/a", "HTTPS://example.org:8443/a?b=c#d", "http://[::1]/x"]
)
async def test_absolute_http_locs_are_accepted(hub: Hub, loc: str) -> None:
    assert (await hub.publish("t", notification([{"loc": loc}]))).status == 202


@pytest.fixture
async def last_id(hub: Hub) -> str:
    resp = await hub.publish("t", notification(changes(2)))
    return str((await resp.json())["ids"][-1])


def beyond(event_id: str) -> str:
    ms, seq = event_id.split("-")
    return f"{int(ms) + 1000}-{seq}"


@pytest.mark.parametrize("how", ["sse-query", "sse-last-event-id", "ws-query"])
async def test_a_resume_point_beyond_the_last_id_is_400(hub: Hub, last_id: str, how: str) -> None:
    since = beyond(last_id)
    path = "/topics/t/ws" if how.startswith("ws") else "/topics/t/events"
    if how == "sse-last-event-id":
        resp = await hub.session.get(hub.url + path, headers={"Last-Event-ID": since})
    else:
        resp = await hub.session.get(hub.url + path, params={"since": since})
    assert resp.status == 400
    answer = await resp.json()
    assert answer["last_id"] == last_id and last_id in answer["error"]


async def test_a_resume_point_on_an_empty_topic_is_400(hub: Hub) -> None:
    resp = await hub.session.get(hub.url + "/topics/empty/events", params={"since": "5-0"})
    assert resp.status == 400 and "nothing published yet" in (await resp.json())["error"]


async def test_resuming_at_the_last_id_or_from_zero_is_fine(hub: Hub, last_id: str) -> None:
    for since in (last_id, "0"):
        async with hub.session.get(hub.url + "/topics/t/events", params={"since": since}) as resp:
            assert resp.status == 200


async def test_websub_hub_since_beyond_the_last_id_is_400(hub: Hub, last_id: str) -> None:
    form = {
        "hub.mode": "subscribe",
        "hub.topic": f"{hub.url}/topics/t",
        "hub.callback": "http://127.0.0.1:9/cb",
        "hub.since": beyond(last_id),
    }
    resp = await hub.session.post(hub.url + "/", data=form)
    assert resp.status == 400
    answer = await resp.json()
    assert "hub.since" in answer["error"] and answer["last_id"] == last_id
