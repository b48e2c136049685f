"""Plain WebSub topics (``RSHUB_WEBSUB_TOPICS``) on a real hub, Redis and callbacks.

A plain topic's publish is its content, of any type: POSTed (a fat ping) or fetched on a
ping. Its subscribers get that content with its exact ``Content-Type``, signed when they
gave a secret, with the ``Link`` headers of WebSub §7; the topic URI of one of the hub's own
plain topics serves it. ResourceSync topics are not affected (their validation is
tests/hub/test_ping.py's and test_ingest.py's).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from pydantic import ValidationError

from hub.core.placement import subscription_id
from hub.core.settings import Settings, describe_error
from hub.store import keys
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_websub import subscribe
from tests.support import changes, free_port, notification, wait_for

TEXT = "text/plain; charset=ISO-8859-1"


class TopicSite:
    """Another site's plain topic on 127.0.0.1: the content and Content-Type tests set."""

    def __init__(self) -> None:
        self.body = b"<p>first</p>"
        self.content_type = "text/html;charset=UTF-8"
        self.gets = 0
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def _serve(self, _request: web.Request) -> web.Response:
        self.gets += 1
        return web.Response(body=self.body, headers={"Content-Type": self.content_type})

    async def start(self) -> TopicSite:
        app = web.Application()
        app.router.add_get("/feed", self._serve)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}/feed"
        return self

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    # Every topic URL on 127.0.0.1 (the test sites') is plain, and so is this hub's "notes".
    return {"websub_topics": ["notes", "http://127.0.0.1:"], "retry_base_seconds": 0.05}


@pytest.fixture
async def site() -> AsyncIterator[TopicSite]:
    server = await TopicSite().start()
    yield server
    await server.stop()


@pytest.fixture
async def callback() -> AsyncIterator[CallbackServer]:
    server = await CallbackServer(notifications=False).start()
    yield server
    await server.stop()


async def post_notes(
    hub: Hub, body: bytes, content_type: str | None = TEXT, **headers: str
) -> tuple[int, dict[str, Any]]:
    if content_type is not None:
        headers["Content-Type"] = content_type
    async with hub.session.post(f"{hub.url}/topics/notes", data=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def ping(hub: Hub, url: str) -> tuple[int, dict[str, Any]]:
    form = {"hub.mode": "publish", "hub.topic": url}
    async with hub.session.post(f"{hub.url}/", data=form) as resp:
        return resp.status, await resp.json()


def signed(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


async def test_posted_content_is_delivered_whole_with_its_type_and_served_at_the_topic(
    hub: Hub, callback: CallbackServer
) -> None:
    status, first = await post_notes(hub, b"caf\xe9 one\n")
    assert status == 202 and first["accepted"] == 1 and first["content_type"] == TEXT
    await subscribe(hub, callback, "notes", **{"hub.secret": "s3cret"})
    status, second = await post_notes(hub, b"caf\xe9 two\n")
    assert status == 202 and second["length"] == 9
    await wait_for(lambda: len(callback.deliveries) >= 1)
    [delivery] = callback.deliveries
    topic = f"{hub.url}/topics/notes"
    assert delivery.body == b"caf\xe9 two\n"
    assert delivery.headers["Content-Type"] == TEXT
    assert delivery.headers["Link"] == f'<{hub.url}/>; rel="hub", <{topic}>; rel="self"'
    assert delivery.headers["X-Hub-Signature"] == signed(delivery.body, "s3cret")
    assert delivery.headers["X-RSHub-Last-Event-Id"] == second["ids"][0]
    # The topic URI serves the same bytes, type and discovery links.
    async with hub.session.get(topic) as resp:
        assert resp.status == 200 and await resp.read() == delivery.body
        assert resp.headers["Content-Type"] == TEXT
        assert resp.headers["Link"] == delivery.headers["Link"]
        etag = resp.headers["ETag"]
    async with hub.session.get(topic, headers={"If-None-Match": etag}) as resp:
        assert resp.status == 304
    # Polling Destinations see the topic URL's changes, with type, length and hash.
    async with hub.session.get(f"{topic}/resourcelist.xml") as resp:
        listed = await resp.text()
    digest = hashlib.sha256(delivery.body).hexdigest()
    assert f"<loc>{topic}</loc>" in listed and f"sha-256:{digest}" in listed
    assert 'type="text/plain; charset=ISO-8859-1"' in listed


async def test_a_subscriber_behind_gets_the_newest_content_once(
    hub: Hub, callback: CallbackServer
) -> None:
    ids = []
    for n in range(3):
        ids += (await post_notes(hub, b"version %d" % n))[1]["ids"]
    await subscribe(hub, callback, "notes", **{"hub.since": "0"})
    await wait_for(lambda: len(callback.deliveries) >= 1)
    [delivery] = callback.deliveries
    assert delivery.body == b"version 2"  # WebSub delivers the topic's content, not history
    assert delivery.headers["X-RSHub-Event-Count"] == "3"
    assert delivery.headers["X-RSHub-Last-Event-Id"] == ids[-1]
    assert "X-Hub-Signature" not in delivery.headers


async def test_a_fat_ping_to_the_hub_url_names_another_sites_topic(
    hub: Hub, callback: CallbackServer
) -> None:
    topic = "http://127.0.0.1:9/blog/feed.json"  # never fetched: the content is POSTed
    form = {"hub.mode": "subscribe", "hub.topic": topic, "hub.callback": callback.url}
    assert (await hub.session.post(f"{hub.url}/", data=form)).status == 202
    await wait_for(lambda: len(callback.verifications) == 1)
    headers = {"Content-Type": "application/json", "Link": f'<{topic}>; rel="self"'}
    async with hub.session.post(f"{hub.url}/", data=b'{"a": 1}', headers=headers) as resp:
        assert resp.status == 202, await resp.text()
    await wait_for(lambda: len(callback.deliveries) >= 1)
    delivery = callback.deliveries[0]
    assert delivery.body == b'{"a": 1}' and delivery.headers["Content-Type"] == "application/json"
    assert f'<{topic}>; rel="self"' in delivery.headers["Link"]


async def test_a_ping_fetches_the_content_and_stores_only_what_changed(
    hub: Hub, site: TopicSite, callback: CallbackServer
) -> None:
    form = {"hub.mode": "subscribe", "hub.topic": site.url, "hub.callback": callback.url}
    assert (await hub.session.post(f"{hub.url}/", data=form)).status == 202
    await wait_for(lambda: len(callback.verifications) == 1)
    status, first = await ping(hub, site.url)
    assert status == 202 and first["accepted"] == 1 and first["fetched"] == 1
    assert first["content_type"] == "text/html;charset=UTF-8"
    await wait_for(lambda: len(callback.deliveries) >= 1)
    status, same = await ping(hub, site.url)
    assert status == 202 and same["accepted"] == 0 and site.gets == 2
    site.content_type = "text/html"  # the same bytes, another type: new content
    assert (await ping(hub, site.url))[1]["accepted"] == 1
    site.body, site.content_type = b"\x00\x01binary", 'application/x-thing; q="a\\"b"'
    status, third = await ping(hub, site.url)
    assert third["accepted"] == 1 and third["content_type"] == site.content_type
    await wait_for(lambda: len(callback.deliveries) >= 3)
    assert [d.headers["Content-Type"] for d in callback.deliveries] == [
        "text/html;charset=UTF-8",
        "text/html",
        'application/x-thing; q="a\\"b"',
    ]
    assert callback.deliveries[-1].body == b"\x00\x01binary"


@pytest.mark.parametrize(
    ("body", "content_type", "says"),
    [
        (b"", TEXT, "empty body"),
        (b"x", "text plain", "is not one media type"),
        (b"x", "text/plain; charset", "is not one media type"),
        (b"x", "text/plain, text/html", "is not one media type"),
        (b"x", "text/" + "x" * 600, "longer than 512 characters"),
    ],
)
async def test_a_refused_fat_ping_says_why_and_stores_nothing(
    hub: Hub, body: bytes, content_type: str, says: str
) -> None:
    status, answer = await post_notes(hub, body, content_type)
    assert status == 400 and says in answer["error"], answer
    assert not await hub.redis.exists(keys.content("notes"), keys.events("notes"))


async def test_a_fat_ping_without_a_type_is_octet_stream(hub: Hub) -> None:
    status, answer = await post_notes(hub, b"bytes", None)
    assert status == 202 and answer["content_type"] == "application/octet-stream"


async def test_an_idempotency_key_makes_a_retry_store_nothing(
    hub: Hub, callback: CallbackServer
) -> None:
    await subscribe(hub, callback, "notes")
    status, first = await post_notes(hub, b"once", **{"Idempotency-Key": "k1"})
    again_status, again = await post_notes(hub, b"once", **{"Idempotency-Key": "k1"})
    assert status == again_status == 202 and again["replayed"] is True
    assert again["ids"] == first["ids"] and await hub.redis.xlen(keys.events("notes")) == 1
    status, conflict = await post_notes(hub, b"other", **{"Idempotency-Key": "k1"})
    assert status == 409 and "Idempotency-Key" in conflict["error"]
    async with hub.session.get(f"{hub.url}/topics/notes") as resp:
        assert await resp.read() == b"once"  # the refused body wrote nothing
    await wait_for(lambda: len(callback.deliveries) >= 1)
    assert [d.body for d in callback.deliveries] == [b"once"]


async def test_resourcesync_topics_keep_their_rules(hub: Hub) -> None:
    async with hub.session.post(
        f"{hub.url}/topics/news", data=b"hello", headers={"Content-Type": "text/plain"}
    ) as resp:
        assert resp.status == 415
    assert (await hub.publish("news", notification(changes(1)))).status == 202
    async with hub.session.get(f"{hub.url}/topics/news") as resp:
        assert resp.headers["Content-Type"] == "application/xml; charset=utf-8"
        assert "<urlset" in await resp.text()


async def test_deleting_a_plain_topic_deletes_its_content(hub: Hub) -> None:
    assert (await post_notes(hub, b"gone soon"))[0] == 202
    assert await hub.redis.exists(keys.content("notes"))
    async with hub.session.delete(f"{hub.url}/admin/topics/notes") as resp:
        assert resp.status == 200, await resp.text()
    assert not await hub.redis.exists(keys.content("notes"))


class TestWithoutPlainTopics:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {}

    async def test_a_topic_not_declared_plain_takes_only_notifications(
        self, hub: Hub, site: TopicSite
    ) -> None:
        status, answer = await post_notes(hub, b"plain words")
        assert status == 415 and "XML" in answer["error"]
        status, answer = await ping(hub, site.url)
        assert status == 400 and "not a Sitemap urlset" in answer["error"], answer


def test_the_setting_takes_names_and_url_prefixes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RSHUB_WEBSUB_TOPICS", '["blog", "https://blog.example/feeds/"]')
    assert Settings().websub_topics == ["blog", "https://blog.example/feeds/"]


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("-blog", "neither a topic name"),
        ("ftp://blog.example/", "absolute http(s) URL"),
        ("https:///feeds", "absolute http(s) URL"),
        ("a/b", "neither a topic name"),
    ],
)
def test_a_bad_entry_is_refused_naming_the_variable(entry: str, says: str) -> None:
    with pytest.raises(ValidationError) as caught:
        Settings(websub_topics=[entry])
    text = describe_error(caught.value)
    assert "RSHUB_WEBSUB_TOPICS" in text and says in text, text


@dataclass
class Down(CallbackServer):
    """Refuses every delivery (500) while ``down``."""

    down: bool = True

    async def _deliver(self, request: web.Request) -> web.Response:
        if self.down:
            self.refused += 1
            return web.Response(status=500)
        return await super()._deliver(request)


class TestDeadLetters:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {
            "websub_topics": ["notes"],
            "retry_base_seconds": 0.02,
            "retry_max_seconds": 0.1,
            "retry_window_seconds": 0.3,
        }

    async def test_a_replay_is_the_topics_content_with_its_type(self, hub: Hub) -> None:
        down = await Down(notifications=False).start()
        try:
            await subscribe(hub, down, "notes", **{"hub.secret": "s3cret"})
            await post_notes(hub, b"lost once")
            sub_id = subscription_id("notes", down.url)
            letters = f"{hub.url}/admin/subscriptions/{sub_id}/dead-letters"

            async def dead_lettered() -> bool:
                async with hub.session.get(letters) as resp:
                    return bool((await resp.json())["total"] == 1)

            await wait_for(dead_lettered)
            down.down = False
            async with hub.session.post(f"{letters}/replay") as resp:
                assert resp.status == 200 and (await resp.json())["replayed"] == 1
            [delivery] = down.deliveries
            assert delivery.body == b"lost once" and delivery.headers["Content-Type"] == TEXT
            assert delivery.headers["X-RSHub-Replay"] == "dead-letter"
            assert delivery.headers["X-Hub-Signature"] == signed(b"lost once", "s3cret")
        finally:
            await down.stop()
