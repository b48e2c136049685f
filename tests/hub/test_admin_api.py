"""The admin API against a real hub and Redis: topics, their deletion, subscriptions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from hub.core.settings import Settings
from hub.store import keys
from hub.web.app import RUNTIME
from tests.conftest import Hub, start_hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_websub import subscribe
from tests.redis_cluster import RedisClusterProcesses
from tests.support import changes, free_port, notification, wait_for

ADMIN = {"Authorization": "Bearer adm"}


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {
        "admin_token": "adm",
        "retry_base_seconds": 30.0,
        "retry_max_seconds": 60.0,
        "suspend_after_failures": 1,
        "resourcelist_page_entries": 2,
        "resourcelist_snapshot_seconds": 0,
    }


@pytest.fixture
async def callback() -> AsyncIterator[CallbackServer]:
    server = await CallbackServer().start()
    yield server
    await server.stop()


async def admin(
    hub: Hub, method: str, path: str, status: int = 200, **kwargs: Any
) -> dict[str, Any]:
    kwargs.setdefault("headers", ADMIN)
    async with hub.session.request(method, hub.url + path, **kwargs) as resp:
        body = await resp.json()
        assert resp.status == status, body
        return dict(body)


async def tagged_keys(hub: Hub, topic: str) -> list[bytes]:
    return [k async for k in hub.redis.scan_iter(match=f"rshub:{{{topic}}}:*")]


async def test_the_admin_token_is_required(hub: Hub) -> None:
    body = await admin(hub, "GET", "/admin/topics", 401, headers={})
    assert body["status"] == 401 and "Bearer" in body["error"]
    await admin(hub, "GET", "/admin/topics", 403, headers={"Authorization": "Bearer no"})
    await admin(hub, "DELETE", "/admin/topics/t", 403, headers={"Authorization": "Bearer no"})
    assert (await admin(hub, "GET", "/admin/topics"))["topics"] == []


class TestWithoutAdminToken:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"tokens": ["pub"]}

    async def test_a_hub_with_publisher_tokens_needs_an_admin_token(self, hub: Hub) -> None:
        body = await admin(hub, "GET", "/admin/topics", 403, headers={})
        assert "--admin-token" in body["error"]
        headers = {"Authorization": "Bearer pub"}
        await admin(hub, "GET", "/admin/subscriptions", 403, headers=headers)


class TestOpenLoopbackHub:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {}

    async def test_loopback_clients_of_an_open_hub_need_no_token(self, hub: Hub) -> None:
        await hub.publish("t", notification(changes(1)))
        body = await admin(hub, "GET", "/admin/topics", headers={})
        assert [t["name"] for t in body["topics"]] == ["t"]


async def test_topics_and_one_topic(hub: Hub, callback: CallbackServer) -> None:
    a1 = (await (await hub.publish("a", notification(changes(3)))).json())["ids"]
    a2 = (await (await hub.publish("a", notification(changes(2, start=2)))).json())["ids"]
    b = (await (await hub.publish("b", notification(changes(1)))).json())["ids"]
    await subscribe(hub, callback, "a")
    body = await admin(hub, "GET", "/admin/topics")
    rows = {t["name"]: t for t in body["topics"]}
    assert sorted(rows) == ["a", "b"]
    assert rows["a"]["length"] == 5 and rows["b"]["length"] == 1
    assert rows["a"]["first_id"] == a1[0] and rows["a"]["last_id"] == a2[-1]
    assert rows["b"]["first_id"] == rows["b"]["last_id"] == b[0]
    assert rows["a"]["subscriptions"] == 1 and rows["b"]["subscriptions"] == 0
    # The hub's clock, not Redis's (which made the id): close, not equal.
    assert abs(rows["a"]["last_publish_ms"] - int(a2[-1].split("-")[0])) < 5000
    assert rows["a"]["last_publish"].startswith("20")

    one = await admin(hub, "GET", "/admin/topics/a")
    assert {k: one[k] for k in rows["a"]} == rows["a"]
    assert one["changelist_pages"] == 1
    assert one["resourcelist_size"] == 4  # r0, r1, r2 (twice), r3
    missing = await admin(hub, "GET", "/admin/topics/nope", 404)
    assert missing["topic"] == "nope"
    await admin(hub, "GET", "/admin/topics/bad%20name", 400)


async def test_deleting_a_topic_removes_every_key_and_ends_its_streams(
    hub: Hub, callback: CallbackServer
) -> None:
    await hub.publish("t", notification(changes(5)), **{"Idempotency-Key": "k1"})
    await hub.publish("keep", notification(changes(1)))
    await subscribe(hub, callback, "t")
    # Resource List snapshot pages (2 entries a page), Change List pages, a live WebSocket
    # and a live SSE client: all of them must go.
    async with hub.session.get(f"{hub.url}/topics/t/resourcelist.xml") as resp:
        assert resp.status == 200 and b"sitemapindex" in await resp.read()
    ws = await hub.session.ws_connect(f"{hub.url}/topics/t/ws")
    sse = await hub.session.get(f"{hub.url}/topics/t/events")
    assert sse.status == 200
    await wait_for(lambda: "t" in hub.app[RUNTIME].feeds._feeds)
    before = await tagged_keys(hub, "t")
    assert any(b":idem:" in k for k in before) and any(b":rl:" in k for k in before)

    body = await admin(hub, "DELETE", "/admin/topics/t")
    # Removing the one subscription already removed its keys (subs, cursors, owners, holds).
    assert body == {"topic": "t", "deleted": True, "keys": len(before) - 4, "subscriptions": 1}
    assert await tagged_keys(hub, "t") == []
    assert not await hub.redis.sismember(keys.TOPICS, "t")
    assert not await hub.redis.sismember(keys.SUBSCRIBED_TOPICS, "t")
    assert await tagged_keys(hub, "keep")  # other topics untouched

    message = await asyncio.wait_for(ws.receive(), 5)
    assert message.type is aiohttp.WSMsgType.CLOSE and message.data == 1000
    assert message.extra == "topic deleted"
    tail = await asyncio.wait_for(sse.content.read(), 5)
    assert b"event: deleted\ndata: t\n\n" in tail
    sse.close()
    await wait_for(lambda: not any(k[0] == "t" for k in hub.app[RUNTIME].delivery.workers))

    async with hub.session.get(f"{hub.url}/topics/t/capabilitylist.xml") as resp:
        assert resp.status == 404
    await admin(hub, "DELETE", "/admin/topics/t", 404)
    assert [t["name"] for t in (await admin(hub, "GET", "/admin/topics"))["topics"]] == ["keep"]

    # The name is free again: a new publish starts a new topic, listed and served.
    assert (await hub.publish("t", notification(changes(1)))).status == 202
    async with hub.session.get(f"{hub.url}/.well-known/resourcesync") as resp:
        assert b"/topics/t/capabilitylist.xml" in await resp.read()
    assert (await admin(hub, "GET", "/admin/topics/t"))["length"] == 1


async def test_deleting_a_topic_named_like_an_internal_tag_leaves_the_hub_keys(hub: Hub) -> None:
    """Topic keys are found by their hash tag; the hub-wide keys (the nodes' heartbeats, the
    leader) carry a tag no topic name can spell, so deleting a topic named ``hub`` removes
    that topic's keys only."""

    async def hub_keys() -> bool:
        return int(await hub.redis.exists(keys.NODES, keys.LEADER)) == 2

    await wait_for(hub_keys)
    for name in ("hub", "revocations", "t"):
        assert (await hub.publish(name, notification(changes(2)))).status == 202
        assert await tagged_keys(hub, name)
        body = await admin(hub, "DELETE", f"/admin/topics/{name}")
        assert body["deleted"] is True
        assert await tagged_keys(hub, name) == []
        assert await hub_keys()


async def test_subscriptions_lag_resume_and_delete(hub: Hub) -> None:
    failing = await CallbackServer(statuses=[500]).start()  # 503 never suspends
    healthy = await CallbackServer().start()
    try:
        await subscribe(hub, failing, "t")
        await subscribe(hub, healthy, "u")
        ids = (await (await hub.publish("t", notification(changes(3)))).json())["ids"]
        await hub.publish("u", notification(changes(1)))
        await wait_for(lambda: failing.refused == 1 and len(healthy.ids) == 1)

        async def suspended() -> list[dict[str, Any]]:
            rows = await admin(hub, "GET", "/admin/subscriptions?state=suspended")
            return list(rows["subscriptions"])

        await wait_for(suspended)
        (row,) = await suspended()
        assert row["topic"] == "t" and row["callback"] == failing.url
        assert row["failures"] == 1 and row["last_error"] == "HTTP 500"
        assert row["lag_events"] == 3 and row["last_id"] == ids[-1]
        assert row["lag_seconds"] >= 0 and row["expires_at"] > row["created_at"]
        assert row["retry_at"] is not None

        rows = (await admin(hub, "GET", "/admin/subscriptions?topic=u"))["subscriptions"]
        assert [(r["callback"], r["state"], r["lag_events"]) for r in rows] == [
            (healthy.url, "active", 0)
        ]
        assert rows[0]["lag_seconds"] == 0
        everything = (await admin(hub, "GET", "/admin/subscriptions"))["subscriptions"]
        assert len(everything) == 2
        await admin(hub, "GET", "/admin/subscriptions?state=sleepy", 400)

        # The back-off is 15-30 s: only the resume makes it deliver within the wait below.
        form = {"topic": "t", "callback": failing.url}
        resumed = await admin(hub, "POST", "/admin/subscriptions/resume", data=form, headers=ADMIN)
        assert resumed["state"] == "active" and resumed["failures"] == 0
        await wait_for(lambda: len(failing.ids) == 3, timeout=5)
        assert failing.ids == ids

        # The callback has the POST before the hub writes the cursor its answer moves.
        async def caught_up() -> bool:
            rows = await admin(hub, "GET", "/admin/subscriptions?topic=t")
            row = rows["subscriptions"][0]
            return bool(row["state"] == "active" and row["lag_events"] == 0)

        await wait_for(caught_up, timeout=5)

        # Delete by JSON body, naming the topic by its URL.
        target = {"topic": f"{hub.url}/topics/t", "callback": failing.url}
        await admin(hub, "DELETE", "/admin/subscriptions", json=target, headers=ADMIN)
        await admin(hub, "DELETE", "/admin/subscriptions", 404, json=target, headers=ADMIN)
        await wait_for(lambda: not any(k[0] == "t" for k in hub.app[RUNTIME].delivery.workers))
        rows = (await admin(hub, "GET", "/admin/subscriptions"))["subscriptions"]
        assert [r["topic"] for r in rows] == ["u"]
    finally:
        await failing.stop()
        await healthy.stop()


@pytest.mark.parametrize(
    ("body", "missing"),
    [({"topic": "t"}, "callback"), ({"callback": "http://127.0.0.1:1/cb"}, "topic")],
)
async def test_a_missing_field_is_named(hub: Hub, body: dict[str, str], missing: str) -> None:
    for kwargs in ({"json": body}, {"data": body}):
        for method, path in (
            ("POST", "/admin/subscriptions/resume"),
            ("DELETE", "/admin/subscriptions"),
        ):
            answer = await admin(hub, method, path, 400, headers=ADMIN, **kwargs)
            assert answer["error"] == f"missing field {missing!r}" and answer["field"] == missing
    unknown = {"topic": "t", "callback": "http://127.0.0.1:1/cb"}
    await admin(hub, "POST", "/admin/subscriptions/resume", 404, json=unknown, headers=ADMIN)


async def test_topics_and_deletion_on_a_redis_cluster(
    redis_cluster: RedisClusterProcesses,
) -> None:
    for _, port in redis_cluster.nodes:
        node = redis_cluster.client(port)
        node.flushall()
        node.close()
    host, port = redis_cluster.nodes[0]
    settings = Settings(
        host="127.0.0.1", port=free_port(), admin_token="adm", resourcelist_page_entries=2
    )
    runner, app = await start_hub(settings, f"redis+cluster://{host}:{port}")
    try:
        async with aiohttp.ClientSession() as session:
            hub = Hub(settings.public_url, app, settings, session)
            names = [f"topic{i}" for i in range(6)]  # spread over the three masters
            for name in names:
                resp = await hub.publish(name, notification(changes(3)), **{"Idempotency-Key": "k"})
                assert resp.status == 202
            async with session.get(f"{hub.url}/topics/topic0/resourcelist.xml") as resp:
                assert resp.status == 200
            rows = (await admin(hub, "GET", "/admin/topics"))["topics"]
            assert [(r["name"], r["length"]) for r in rows] == [(n, 3) for n in names]

            def tagged(name: str) -> list[bytes]:
                found: list[bytes] = []
                for _, node_port in redis_cluster.nodes:
                    node = redis_cluster.client(node_port)
                    found += list(node.scan_iter(match=f"rshub:{{{name}}}:*"))
                    node.close()
                return found

            assert any(b":rl:" in k for k in tagged("topic0"))
            await admin(hub, "DELETE", "/admin/topics/topic0")
            assert tagged("topic0") == []
            assert all(tagged(name) for name in names[1:])
            rows = (await admin(hub, "GET", "/admin/topics"))["topics"]
            assert [r["name"] for r in rows] == names[1:]
    finally:
        await runner.cleanup()
