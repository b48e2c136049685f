"""CORS for browser clients against a real hub: preflights and grants on documents,
streams and publish; WebSocket ``Origin``; hostile origins and request headers."""

from __future__ import annotations

import random
import string
from typing import Any

import aiohttp
import pytest

from tests.conftest import Hub
from tests.hub.test_read_access import PUB
from tests.support import changes, notification
from tests.watchdog import Watchdog

APP = "http://app.example:3000"
ACAO = "Access-Control-Allow-Origin"

SHARED = [
    "/topics/t",
    "/topics/t/capabilitylist.xml",
    "/topics/t/changelist.xml",
    "/topics/t/resourcelist.xml",
    "/.well-known/resourcesync",
    "/openapi.json",
]


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"tokens": ["pub"], "cors_origins": [APP + "/", "https://other.example"]}


@pytest.fixture
async def published(hub: Hub) -> Hub:
    assert (await hub.publish("t", notification(changes(2)), **PUB)).status == 202
    return hub


async def preflight(
    hub: Hub, path: str, origin: str, method: str, headers: str = ""
) -> aiohttp.ClientResponse:
    asked = {"Origin": origin, "Access-Control-Request-Method": method}
    if headers:
        asked["Access-Control-Request-Headers"] = headers
    async with hub.session.options(hub.url + path, headers=asked) as resp:
        await resp.read()
        return resp


async def test_preflights_are_granted_for_documents_streams_and_publish(published: Hub) -> None:
    hub = published
    for path in [*SHARED, "/topics/t/events", "/topics/t/ws"]:
        resp = await preflight(hub, path, APP, "GET", "Authorization, Last-Event-ID")
        assert resp.status == 204, path
        assert resp.headers[ACAO] == APP and "Origin" in resp.headers["Vary"]
        assert "authorization" in resp.headers["Access-Control-Allow-Headers"]
        assert "Retry-After" in resp.headers["Access-Control-Expose-Headers"]
        assert "Access-Control-Allow-Credentials" not in resp.headers
    for path in ("/topics/t", "/"):
        resp = await preflight(hub, path, APP, "POST", "authorization,content-type,link")
        assert resp.status == 204 and "POST" in resp.headers["Access-Control-Allow-Methods"]
    # A method the URL does not answer is not promised (GET / is the dashboard: not shared).
    resp = await preflight(hub, "/", APP, "GET")
    assert resp.status == 403 and ACAO not in resp.headers
    resp = await preflight(hub, "/topics/t/changelist.xml", APP, "POST")
    assert resp.status == 403 and ACAO not in resp.headers


async def test_answers_to_allowed_origins_carry_the_grant_errors_too(published: Hub) -> None:
    hub = published
    for path in SHARED:
        async with hub.session.get(hub.url + path, headers={"Origin": APP}) as resp:
            await resp.read()
            assert resp.status == 200 and resp.headers[ACAO] == APP, path
            assert "Origin" in resp.headers["Vary"]
    async with hub.session.get(hub.url + "/topics/t/events", headers={"Origin": APP}) as resp:
        assert resp.status == 200 and resp.headers[ACAO] == APP  # SSE: set before prepare
    headers = {"Origin": APP, "Content-Type": "application/xml"}
    body = notification(changes(1))
    async with hub.session.post(hub.url + "/topics/t", data=body, headers=headers) as resp:
        assert resp.status == 401 and resp.headers[ACAO] == APP  # the page can read why
        assert "Bearer" in (await resp.json())["error"]
    async with hub.session.post(
        hub.url + "/topics/t", data=body, headers={**headers, **PUB}
    ) as resp:
        assert resp.status == 202 and resp.headers[ACAO] == APP
    # Never the admin API, /metrics or the dashboard.
    for path in ("/admin/topics", "/metrics", "/"):
        async with hub.session.get(hub.url + path, headers={"Origin": APP}) as resp:
            await resp.read()
            assert ACAO not in resp.headers, path
    # Without Origin: no grant, but caches are told the answer depends on it.
    async with hub.session.get(hub.url + "/topics/t/changelist.xml") as resp:
        await resp.read()
        assert ACAO not in resp.headers and "Origin" in resp.headers["Vary"]


async def test_websocket_origins_listed_or_own_are_let_in_others_refused(published: Hub) -> None:
    hub = published
    url = hub.url + "/topics/t/ws"
    for origin in (APP, hub.url, None):  # listed, the hub's own page, not a browser
        async with hub.session.ws_connect(url, origin=origin) as ws:
            assert not ws.closed
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        async with hub.session.ws_connect(url, origin="http://evil.example"):
            pass
    assert refused.value.status == 403


HOSTILE_ORIGINS = [
    "null",
    "http://evil.example",
    APP + ".evil.example",
    APP.upper(),
    APP + "/",
    "http://app.example:3001",
    "x" * 6000,
    "http://" + "a" * 4000 + ".example",
    "\t",
    "*",
]


async def test_hostile_origins_get_no_grant_and_no_5xx(published: Hub) -> None:
    hub = published
    await preflight(hub, "/topics/t", APP, "GET")
    async with Watchdog() as dog:
        for origin in HOSTILE_ORIGINS:
            for path in ("/topics/t/changelist.xml", "/topics/t", "/"):
                resp = await preflight(hub, path, origin, "GET")
                assert resp.status in (403, 405), (origin[:40], path)
                assert ACAO not in resp.headers
                async with hub.session.get(hub.url + path, headers={"Origin": origin}) as got:
                    await got.read()
                    assert got.status < 500 and ACAO not in got.headers, origin[:40]
        for method, headers in [
            ("DELETE", ""),
            ("get", ""),
            ("", ""),
            ("GET", "X-Evil"),
            ("GET", "authorization, cookie"),
            ("GET", ",".join(["authorization"] * 500)),
            ("GET" * 2000, ""),
        ]:
            resp = await preflight(hub, "/topics/t", APP, method, headers)
            assert resp.status == 403 and ACAO not in resp.headers, (method[:20], headers[:40])
            assert resp.content_type == "application/json"
    await dog.sockets_back()


def _random_text(rng: random.Random) -> str:
    alphabet = string.printable.replace("\r", "").replace("\n", "").replace("\x0b", "")
    alphabet = alphabet.replace("\x0c", "")
    n = rng.choice([0, 1, 5, 30, 200, 3000])
    return "".join(rng.choice(alphabet) for _ in range(n))


async def test_a_seeded_fuzz_of_origins_and_preflight_headers(
    published: Hub, redis_url: str
) -> None:
    hub = published
    rng = random.Random(20261124)
    allowed = {APP, "https://other.example"}
    paths = [*SHARED, "/topics/t/events", "/", "/topics/%00", "/admin/topics", "/nowhere"]
    for path in paths[:-3]:  # the hub's Redis connections are open before sockets are counted
        await preflight(hub, path, APP, "GET")
    grants = 0
    async with Watchdog() as dog, aiohttp.ClientSession() as session:
        for _ in range(300):
            origin = rng.choice([*allowed, "null", _random_text(rng), APP + _random_text(rng)])
            headers = {"Origin": origin}
            if rng.random() < 0.7:
                headers["Access-Control-Request-Method"] = rng.choice(
                    ["GET", "POST", "PUT", _random_text(rng)]
                )
            if rng.random() < 0.5:
                headers["Access-Control-Request-Headers"] = rng.choice(
                    ["authorization", "last-event-id, authorization", _random_text(rng)]
                )
            method = rng.choice(["OPTIONS", "OPTIONS", "GET", "HEAD"])
            path = rng.choice(paths)
            if path.endswith("/events"):
                method = "OPTIONS"  # a GET would follow the stream forever
            async with session.request(method, hub.url + path, headers=headers) as resp:
                await resp.read()
                assert resp.status < 500, (method, path, headers)
                granted = resp.headers.get(ACAO)
                assert granted is None or (granted == origin and origin in allowed), headers
                grants += granted is not None
    assert grants >= 30  # the listed origins were granted all along
    # Documents built off the loop may have opened one more pooled Redis connection.
    await dog.sockets_back()


class TestWithoutOrigins:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {}

    async def test_no_cors_headers_and_preflight_is_405_as_before(self, hub: Hub) -> None:
        await hub.publish("t", notification(changes(1)))
        resp = await preflight(hub, "/topics/t/changelist.xml", APP, "GET")
        assert resp.status == 405 and ACAO not in resp.headers
        async with hub.session.get(
            hub.url + "/topics/t/changelist.xml", headers={"Origin": APP}
        ) as resp:
            await resp.read()
            assert resp.status == 200 and ACAO not in resp.headers
            assert "Origin" not in resp.headers.get("Vary", "")


@pytest.mark.parametrize(
    "bad", ["app.example", "ftp://x.example", "http://x.example/path", "http://"]
)
def test_a_bad_origin_setting_is_named(bad: str) -> None:
    from pydantic import ValidationError

    from hub.core.settings import Settings, describe_error

    with pytest.raises(ValidationError) as caught:
        Settings(cors_origins=[bad])
    assert "RSHUB_CORS_ORIGINS" in describe_error(caught.value)
