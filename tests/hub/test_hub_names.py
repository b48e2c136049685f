"""One hub, whatever its name: on loopback, ``localhost``, ``127.0.0.1`` and ``[::1]`` on its
port are the hub, like its base URL and every ``--alias-url``; a hub topic URL on a host it
does not know is refused (400 naming what it knows), never mapped to a derived topic."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.commands import Command
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.publisher.helpers import stored_events
from tests.support import notification, wait_for


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"alias_urls": ["http://hub.invalid:8080"]}


@pytest.fixture
async def callback() -> AsyncIterator[CallbackServer]:
    server = await CallbackServer().start()
    yield server
    await server.stop()


def port(hub: Hub) -> int:
    return int(hub.url.rsplit(":", 1)[1])


async def subscriptions(hub: Hub, topic: str) -> list[dict[str, Any]]:
    async with hub.session.get(f"{hub.url}/topics/{topic}/subscriptions") as resp:
        assert resp.status == 200
        return list((await resp.json())["subscriptions"])


@pytest.mark.parametrize("name", ["localhost", "[::1]", "hub.invalid"])
async def test_every_name_of_the_hub_subscribes_to_the_same_topic(
    hub: Hub, callback: CallbackServer, name: str
) -> None:
    host = f"{name}:8080" if name == "hub.invalid" else f"{name}:{port(hub)}"
    topic_url = f"http://{host}/topics/demo"
    form = {"hub.mode": "subscribe", "hub.topic": topic_url, "hub.callback": callback.url}
    async with hub.session.post(hub.url + "/", data=form) as resp:
        assert resp.status == 202, await resp.text()
    await wait_for(lambda: callback.verifications)
    assert callback.verifications[0]["hub.topic"] == topic_url
    [row] = await subscriptions(hub, "demo")  # the topic itself, not "localhost-<digest>"
    assert row["callback"] == callback.url
    await hub.publish("demo", notification([{"loc": "http://e.org/one"}]))
    await wait_for(lambda: callback.locs == ["http://e.org/one"])


@pytest.mark.parametrize(
    "stray",
    [
        "http://localhost:1/topics/demo",  # the hub's name, another port
        "http://elsewhere.invalid/topics/demo",
        "http://hub.invalid:9090/topics/demo",  # an alias's host, another port
    ],
)
async def test_a_hub_topic_url_on_an_unknown_host_is_refused(
    hub: Hub, callback: CallbackServer, redis_url: str, stray: str
) -> None:
    form = {"hub.mode": "subscribe", "hub.topic": stray, "hub.callback": callback.url}
    async with hub.session.post(hub.url + "/", data=form) as resp:
        assert resp.status == 400
        error = (await resp.json())["error"]
    assert f"{hub.url}/topics/" in error and "http://hub.invalid:8080" in error, error
    headers = {"Content-Type": "application/xml", "Link": f'<{stray}>; rel="self"'}
    body = notification([{"loc": "http://e.org/x"}])
    async with hub.session.post(hub.url + "/", data=body, headers=headers) as resp:
        assert resp.status == 400
        assert f"{hub.url}/topics/" in (await resp.json())["error"]
    # Nothing stored, nobody verified, no topic made up.
    assert not callback.verifications
    async with hub.session.get(f"{hub.url}/admin/topics") as resp:
        listed = json.dumps(await resp.json())
    assert "demo" not in listed and "localhost-" not in listed and "elsewhere" not in listed
    assert not await stored_events(redis_url, "demo")


async def test_a_foreign_topic_url_on_another_path_keeps_its_derived_topic(
    hub: Hub, callback: CallbackServer
) -> None:
    foreign = "http://source.invalid/feeds/news"
    form = {"hub.mode": "subscribe", "hub.topic": foreign, "hub.callback": callback.url}
    async with hub.session.post(hub.url + "/", data=form) as resp:
        assert resp.status == 202, await resp.text()
    await wait_for(lambda: callback.verifications)
    assert callback.verifications[0]["hub.topic"] == foreign


async def test_subscribe_via_localhost_gets_what_is_published_via_127(hub: Hub) -> None:
    cmd = Command(
        "subscribe", "--hub", f"http://localhost:{port(hub)}", "--topic", "demo",
        "--via", "webhook", "--limit", "1", "--no-fallback",
    )  # fmt: skip
    await cmd.start()
    try:
        await wait_for(lambda: subscriptions(hub, "demo"), 20)
        resp = await hub.publish("demo", notification([{"loc": "http://e.org/via-127"}]))
        assert resp.status == 202
        assert await cmd.wait(20) == 0, cmd.stderr
    finally:
        await cmd.stop()
    [line] = cmd.lines
    assert json.loads(line)["loc"] == "http://e.org/via-127"
