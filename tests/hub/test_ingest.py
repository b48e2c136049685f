"""Publishing: validation, atomic storage, idempotency, access control, hostile input."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis

from hub.store import keys
from tests.conftest import Hub
from tests.support import changes, notification


async def stored(hub: Hub, redis_url: str, topic: str) -> list[dict[str, Any]]:
    import orjson

    client = aioredis.Redis.from_url(redis_url)
    try:
        rows = await client.xrange(keys.events(topic))
    finally:
        await client.aclose()
    return [orjson.loads(fields[b"e"]) for _id, fields in rows]


async def test_publish_stores_every_change_in_order(hub: Hub, redis_url: str) -> None:
    resp = await hub.publish("news", notification(changes(3)))
    assert resp.status == 202
    body = await resp.json()
    assert body["accepted"] == 3 and len(body["ids"]) == 3
    assert body["ids"] == sorted(body["ids"], key=lambda i: tuple(map(int, i.split("-"))))
    events = await stored(hub, redis_url, "news")
    assert [e["loc"] for e in events] == [c["loc"] for c in changes(3)]
    assert events[0] == {
        "loc": "http://example.org/r0",
        "lastmod": "2026-01-01T00:00:00Z",
        "change": "updated",
    }


async def test_publish_keeps_hash_length_type_and_links(hub: Hub, redis_url: str) -> None:
    change = {
        "loc": "http://example.org/a",
        "change": "created",
        "hash": "md5:1584abdf8ebdc9802ac0c6a7402c03b6",
        "length": 12,
        "type": "text/plain",
        "links": [{"rel": "duplicate", "href": "http://mirror.example.org/a"}],
    }
    assert (await hub.publish("t", notification([change]))).status == 202
    [event] = await stored(hub, redis_url, "t")
    assert event["hash"] == change["hash"] and event["length"] == 12
    assert event["type"] == "text/plain"
    assert event["links"] == [{"rel": "duplicate", "href": "http://mirror.example.org/a"}]


async def test_publish_to_hub_url_with_self_link(hub: Hub, redis_url: str) -> None:
    resp = await hub.session.post(
        hub.url + "/",
        data=notification(changes(2)),
        headers={
            "Content-Type": "application/xml",
            "Link": f'<{hub.url}/>; rel="hub", <{hub.url}/topics/linked>; rel="self"',
        },
    )
    assert resp.status == 202, await resp.text()
    assert (await resp.json())["topic"] == "linked"
    assert len(await stored(hub, redis_url, "linked")) == 2


async def test_foreign_self_link_gets_stable_derived_topic(hub: Hub) -> None:
    headers = {
        "Content-Type": "application/xml",
        "Link": '<http://source.example.com/notify/x>; rel="self"',
    }
    names = set()
    for _ in range(2):
        resp = await hub.session.post(hub.url + "/", data=notification(changes(1)), headers=headers)
        assert resp.status == 202
        names.add((await resp.json())["topic"])
    [name] = names
    assert name.startswith("source.example.com-")


async def test_idempotency_key_stores_once(hub: Hub, redis_url: str) -> None:
    body = notification(changes(5))
    first = await (await hub.publish("t", body, **{"Idempotency-Key": "k1"})).json()
    again = await (await hub.publish("t", body, **{"Idempotency-Key": "k1"})).json()
    assert again["ids"] == first["ids"] and again["replayed"] is True
    assert len(await stored(hub, redis_url, "t")) == 5
    other = await hub.publish("t", notification(changes(1)), **{"Idempotency-Key": "k1"})
    assert other.status == 409
    assert "Idempotency-Key" in (await other.json())["error"]


HOSTILE: list[tuple[str, bytes, int, str]] = [
    (
        "xml bomb",
        b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
        b'<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">'
        b'<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>'
        b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">&lol3;</urlset>',
        400,
        "",
    ),
    (
        "external entity",
        b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY xxe SYSTEM '
        b'"file:///etc/passwd">]><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        b"<url><loc>&xxe;</loc></url></urlset>",
        400,
        "",
    ),
    ("not xml", b"this is not xml {", 400, ""),
    (
        "missing lastmod",
        notification([{"loc": "http://e.org/a"}]).replace(
            b"<lastmod>2026-01-01T00:00:00Z</lastmod>", b""
        ),
        400,
        "lastmod",
    ),
    (
        "bad change value",
        notification([{"loc": "http://e.org/a", "change": "exploded"}]),
        400,
        "change",
    ),
    (
        "resource list",
        notification(changes(1)).replace(
            b'capability="changelist-notification"', b'capability="resourcelist" at="2026-01-01"'
        ),
        400,
        "resourcelist",
    ),
]


@pytest.mark.parametrize(("name", "body", "status", "word"), HOSTILE, ids=[h[0] for h in HOSTILE])
async def test_hostile_publish_is_refused_and_stores_nothing(
    hub: Hub, redis_url: str, name: str, body: bytes, status: int, word: str
) -> None:
    resp = await hub.publish("victim", body)
    assert resp.status == status
    error = (await resp.json())["error"]
    assert word in error
    assert await stored(hub, redis_url, "victim") == []
    health = await hub.session.get(hub.url + "/healthz")
    assert health.status == 200


async def test_huge_body_gets_413_and_stores_nothing(hub: Hub, redis_url: str) -> None:
    import io

    body = notification(changes(1)) + b" " * (20 * 1024 * 1024)
    resp = await hub.session.post(
        f"{hub.url}/topics/victim",
        data=io.BytesIO(body),
        headers={"Content-Type": "application/xml"},
    )
    assert resp.status == 413
    assert await stored(hub, redis_url, "victim") == []
    assert (await hub.session.get(hub.url + "/healthz")).status == 200


@pytest.mark.parametrize("name", ["-bad", "a" * 129, "sp ace", "semi;colon"])
async def test_bad_topic_name_is_400(hub: Hub, name: str) -> None:
    resp = await hub.publish(name, notification(changes(1)))
    assert resp.status in (400, 404)
    if resp.status == 400:
        assert "topic name" in (await resp.json())["error"]


async def test_non_xml_content_type_is_415(hub: Hub) -> None:
    resp = await hub.session.post(
        f"{hub.url}/topics/t", data=b"{}", headers={"Content-Type": "application/json"}
    )
    assert resp.status == 415


class TestTokens:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"tokens": ["global-secret"], "topic_tokens": {"private": ["topic-secret"]}}

    async def test_missing_token_is_401(self, hub: Hub) -> None:
        resp = await hub.publish("t", notification(changes(1)))
        assert resp.status == 401
        assert "Bearer" in (await resp.json())["error"]

    async def test_wrong_token_is_403(self, hub: Hub) -> None:
        resp = await hub.publish("t", notification(changes(1)), Authorization="Bearer nope")
        assert resp.status == 403

    async def test_global_and_topic_tokens(self, hub: Hub) -> None:
        ok = await hub.publish("t", notification(changes(1)), Authorization="Bearer global-secret")
        assert ok.status == 202
        ok = await hub.publish(
            "private", notification(changes(1)), Authorization="Bearer topic-secret"
        )
        assert ok.status == 202
        no = await hub.publish(
            "other", notification(changes(1)), Authorization="Bearer topic-secret"
        )
        assert no.status == 403


def test_open_bind_without_tokens_refuses_to_start() -> None:
    from hub.core.auth import PublisherAuth
    from hub.core.exceptions import ConfigurationError
    from hub.core.settings import Settings

    with pytest.raises(ConfigurationError, match="--open"):
        PublisherAuth.check_startup(Settings(host="0.0.0.0"))
    PublisherAuth.check_startup(Settings(host="0.0.0.0", open=True))
    PublisherAuth.check_startup(Settings(host="0.0.0.0", tokens=["x"]))
    PublisherAuth.check_startup(Settings(host="127.0.0.1"))
