"""A topic is the same topic whichever name of the hub a client used: aliases, proxies."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from hub.core.settings import Settings
from hub.web.app import RUNTIME
from tests.conftest import Hub, start_hub
from tests.hub.callback_server import CallbackServer
from tests.support import changes, free_port, notification, wait_for

PUBLIC = "http://hub.example:8080"


@pytest.fixture
def proxy_ips() -> list[str]:
    return []


@pytest.fixture
async def aliased_hub(redis_url: str, proxy_ips: list[str]) -> AsyncIterator[Hub]:
    """A hub whose public URL is not how the tests reach it; 127.0.0.1:port is an alias."""
    port = free_port()
    settings = Settings(
        host="127.0.0.1",
        port=port,
        base_url=PUBLIC,
        alias_urls=[f"http://127.0.0.1:{port}"],
        forwarded_allow_ips=proxy_ips,
        allow_private_callbacks=True,  # the callbacks here are on loopback
    )
    runner, app = await start_hub(settings, redis_url)
    async with aiohttp.ClientSession() as session:
        yield Hub(f"http://127.0.0.1:{port}", app, settings, session)
    await runner.cleanup()


@pytest.fixture
async def callback() -> AsyncIterator[CallbackServer]:
    server = await CallbackServer().start()
    yield server
    await server.stop()


async def subscribe(hub: Hub, callback: CallbackServer, topic_url: str) -> None:
    form = {"hub.mode": "subscribe", "hub.topic": topic_url, "hub.callback": callback.url}
    async with hub.session.post(hub.url + "/", data=form) as resp:
        assert resp.status == 202, await resp.text()
    await wait_for(lambda: len(callback.verifications) == 1)


async def self_link_topic(hub: Hub, topic_url: str, **headers: str) -> str:
    """The topic a publish to ``POST /`` with ``Link: <topic_url>; rel=self`` lands in."""
    async with hub.session.post(
        hub.url + "/",
        data=notification(changes(1)),
        headers={
            "Content-Type": "application/xml",
            "Link": f'<{topic_url}>; rel="self"',
            **headers,
        },
    ) as resp:
        assert resp.status == 202, await resp.text()
        return str((await resp.json())["topic"])


async def self_link_refusal(hub: Hub, topic_url: str, **headers: str) -> int:
    """The status of a publish to ``POST /`` naming ``topic_url`` that the hub refuses."""
    async with hub.session.post(
        hub.url + "/",
        data=notification(changes(1)),
        headers={
            "Content-Type": "application/xml",
            "Link": f'<{topic_url}>; rel="self"',
            **headers,
        },
    ) as resp:
        assert resp.status != 202, await resp.text()
        assert "does not know" in (await resp.json())["error"]
        return resp.status


async def test_subscribing_by_an_alias_url_gets_the_topics_deliveries(
    aliased_hub: Hub, callback: CallbackServer
) -> None:
    hub = aliased_hub
    await subscribe(hub, callback, f"{hub.url}/topics/t")
    await wait_for(lambda: ("t", callback.url) in hub.app[RUNTIME].delivery.workers)
    ids = (await (await hub.publish("t", notification(changes(2)))).json())["ids"]
    await wait_for(lambda: callback.ids == ids)
    # The subscriber is told the topic URL it subscribed to; documents use the public URL.
    assert f'<{hub.url}/topics/t>; rel="self"' in callback.deliveries[0].headers["Link"]
    async with hub.session.get(f"{hub.url}/topics/t/capabilitylist.xml") as resp:
        body = await resp.text()
    assert f"{PUBLIC}/topics/t/changelist.xml" in body and hub.url not in body


async def test_a_foreign_url_still_gets_a_derived_topic(aliased_hub: Hub) -> None:
    hub = aliased_hub
    assert await self_link_topic(hub, f"{PUBLIC}/topics/t") == "t"
    assert await self_link_topic(hub, f"{hub.url}/topics/t") == "t"
    derived = await self_link_topic(hub, "http://elsewhere.example/feeds/t")
    assert derived.startswith("elsewhere.example-")
    # A hub topic URL on a name this hub does not know: refused, not derived.
    for stray in ("http://elsewhere.example/topics/t", "http://127.0.0.1:1/topics/t"):
        assert await self_link_refusal(hub, stray) == 400


FORWARDED = [
    {"X-Forwarded-Host": "proxy.example", "X-Forwarded-Proto": "https"},
    {"Forwarded": "for=192.0.2.1;host=proxy.example;proto=https"},
]


@pytest.mark.parametrize("proxy_ips", [["127.0.0.0/8"]])
@pytest.mark.parametrize("headers", FORWARDED)
async def test_forwarded_headers_from_an_allowed_peer_name_this_hub(
    aliased_hub: Hub, headers: dict[str, str]
) -> None:
    topic = await self_link_topic(aliased_hub, "https://proxy.example/topics/t", **headers)
    assert topic == "t"
    # Only for that request: without the headers, that name is not this hub's.
    assert await self_link_refusal(aliased_hub, "https://proxy.example/topics/t") == 400


@pytest.mark.parametrize("proxy_ips", [["10.0.0.0/8"], []])
@pytest.mark.parametrize("headers", FORWARDED)
async def test_forwarded_headers_from_other_peers_are_ignored(
    aliased_hub: Hub, headers: dict[str, str]
) -> None:
    refused = await self_link_refusal(aliased_hub, "https://proxy.example/topics/t", **headers)
    assert refused == 400


@pytest.mark.parametrize("proxy_ips", [["127.0.0.1"]])
async def test_a_trusted_proxy_subscription_is_delivered(
    aliased_hub: Hub, callback: CallbackServer
) -> None:
    hub = aliased_hub
    form = {
        "hub.mode": "subscribe",
        "hub.topic": "https://proxy.example/topics/t",
        "hub.callback": callback.url,
    }
    headers = {"X-Forwarded-Host": "proxy.example", "X-Forwarded-Proto": "https"}
    async with hub.session.post(hub.url + "/", data=form, headers=headers) as resp:
        assert resp.status == 202
    await wait_for(lambda: ("t", callback.url) in hub.app[RUNTIME].delivery.workers)
    ids = (await (await hub.publish("t", notification(changes(1)))).json())["ids"]
    await wait_for(lambda: callback.ids == ids)


@pytest.mark.parametrize("proxy_ips", [["127.0.0.1"]])
async def test_loopback_through_a_trusted_proxy_is_not_local_for_admin(
    aliased_hub: Hub,
) -> None:
    async with aliased_hub.session.get(aliased_hub.url + "/admin/topics") as resp:
        assert resp.status == 403 and "loopback" in (await resp.json())["error"]


async def test_loopback_clients_may_use_admin_without_a_proxy(aliased_hub: Hub) -> None:
    async with aliased_hub.session.get(aliased_hub.url + "/admin/topics") as resp:
        assert resp.status == 200


def test_settings_take_comma_separated_lists_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RSHUB_ALIAS_URLS", "http://hub:8080, http://127.0.0.1:8088")
    monkeypatch.setenv("RSHUB_FORWARDED_ALLOW_IPS", '["10.0.0.0/8", "::1"]')
    monkeypatch.setenv("RSHUB_ADMIN_TOKEN", "adm")
    monkeypatch.setenv("RSHUB_TOPIC_READ_TOKENS", '{"news": ["r"]}')
    settings = Settings()
    assert settings.alias_urls == ["http://hub:8080", "http://127.0.0.1:8088"]
    assert settings.forwarded_allow_ips == ["10.0.0.0/8", "::1"]
    assert settings.admin_token == "adm" and settings.topic_read_tokens == {"news": ["r"]}


def test_serve_flags_reach_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from hub.serve.cli import _worker_launch, add_parsers, settings_from_args

    parser = argparse.ArgumentParser()
    add_parsers(parser.add_subparsers())
    argv = ["serve", "--admin-token", "adm", "--token", "p1", "--token", "p2"]
    argv += ["--alias-url", "http://hub:8080"]
    argv += ["--alias-url", "http://127.0.0.1:8088", "--forwarded-allow-ips", "10.0.0.1,::1"]
    args = parser.parse_args(argv)
    settings = settings_from_args(args)
    assert settings.admin_token == "adm"
    assert settings.alias_urls == ["http://hub:8080", "http://127.0.0.1:8088"]
    assert settings.forwarded_allow_ips == ["10.0.0.1", "::1"]
    assert settings.tokens == ["p1", "p2"]
    # Worker processes of `--workers N` get the same settings, the tokens through their
    # environment, never on their command line (any local user can read that).
    worker_argv, env = _worker_launch(args)
    assert not {"adm", "p1", "p2"} & set(worker_argv)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert settings_from_args(parser.parse_args(["serve", *worker_argv])) == settings
