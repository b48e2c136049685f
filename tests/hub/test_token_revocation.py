"""Live token revocation, against real hubs and a real Redis: a revoked read or publisher
token (static or signed), or a removed topic grant, is refused (403 naming the revocation)
and ends the streams and WebSub subscriptions it authorised within a second, on every hub
process on the Redis; lifting lets it back in; revocations outlive a restart; only the
operator may revoke; only fingerprints, never tokens, reach answers and logs. Hostile
request bodies: named cases and a seeded fuzz under the watchdog.

Each bound is ``BOUND_UNSCALED`` seconds (times the load factor) from the revocation's
request to the end seen by the client; the figures are printed (``-s``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from hub.core.read_tokens import mint
from hub.core.revocations import MAX_REVOCATIONS, fingerprint
from hub.core.settings import Settings
from hub.store import keys
from hub.web.app import RUNTIME
from tests.conftest import Hub, start_hub
from tests.hub.callback_server import CallbackServer
from tests.redis_cluster import RedisClusterProcesses
from tests.support import TIME_SCALE, HubProcess, changes, free_port, notification, wait_for
from tests.watchdog import Watchdog

KEY = "the-hub's-signing-key-0123456789abcdef"
ADMIN_TOKEN = "admin-token-7c41d9"
#: Static read tokens of topic "secret": the one revoked, and one whose streams go on.
READER = "reader-token-5b2e91f0"
WITNESS = "witness-token-88d0c3"
#: A static read token of "news" and "sport" (two per-topic grants).
NEWS = "news-and-sport-3a17be"
PUBLISHER = "publisher-token-e6f2a4"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
PUB = {"Authorization": f"Bearer {PUBLISHER}"}
#: The most a revocation may take to end what it ends, request to client (seconds; for
#: wait_for, which scales it itself, unscaled).
BOUND_UNSCALED = 1.0


def _bound() -> float:
    """Taken when used: the load factor is the test's own, not the one at import."""
    return BOUND_UNSCALED * TIME_SCALE


SECRETS = (READER, WITNESS, NEWS, PUBLISHER, ADMIN_TOKEN)

SETTINGS: dict[str, Any] = {
    "tokens": [PUBLISHER],
    "topic_read_tokens": {"secret": [READER, WITNESS], "news": [NEWS], "sport": [NEWS]},
    "jwt_key": KEY,
    "admin_token": ADMIN_TOKEN,
    "access_log": True,
}


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return dict(SETTINGS)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def publish(session: aiohttp.ClientSession, url: str, topic: str, i: int) -> str:
    body = notification(changes(1, start=i))
    headers = {"Content-Type": "application/xml", **PUB}
    async with session.post(f"{url}/topics/{topic}", data=body, headers=headers) as resp:
        answer = await resp.json()
        assert resp.status == 202, answer
        return str(answer["ids"][0])


async def admin(
    session: aiohttp.ClientSession,
    url: str,
    method: str,
    status: int = 200,
    headers: dict[str, str] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """One request to ``/admin/revocations``; its JSON answer, checked for ``status``."""
    headers = ADMIN if headers is None else headers
    async with session.request(
        method, f"{url}/admin/revocations", headers=headers, **kwargs
    ) as resp:
        text = await resp.text()
        assert resp.status == status, text
        for secret in SECRETS:  # a token never comes back
            assert secret not in text, (secret, text)
        return dict(json.loads(text))


async def refusal(session: aiohttp.ClientSession, url: str, token: str) -> dict[str, Any]:
    """What a read of ``url`` with ``token`` gets: 403 naming the revocation."""
    async with session.get(url, headers=bearer(token)) as resp:
        body = dict(await resp.json())
        assert resp.status == 403, body
    assert "revoked" in body["error"] and fingerprint(token)[:12] in body["error"], body
    assert token not in body["error"]
    return body


async def until_closed(ws: aiohttp.ClientWebSocketResponse) -> tuple[int | None, str, float]:
    """Read a WebSocket until it is closed: its close code, reason, and when (epoch s)."""
    async with asyncio.timeout(30 * TIME_SCALE):
        while True:
            msg = await ws.receive()
            if msg.type is aiohttp.WSMsgType.TEXT:
                continue
            reason = msg.extra if msg.type is aiohttp.WSMsgType.CLOSE else ""
            return ws.close_code, str(reason or ""), time.time()


async def sse_end(resp: aiohttp.ClientResponse) -> tuple[bytes, float]:
    """The last event of an SSE response, read to its end, and when it ended."""
    body = b""
    async with asyncio.timeout(30 * TIME_SCALE):
        async for chunk in resp.content.iter_any():
            body += chunk
    return body.rstrip(b"\n").rsplit(b"\n\n", 1)[-1], time.time()


async def next_message(ws: aiohttp.ClientWebSocketResponse) -> list[dict[str, Any]]:
    msg = await asyncio.wait_for(ws.receive(), 5 * TIME_SCALE)
    assert msg.type is aiohttp.WSMsgType.TEXT, msg
    return list(orjson.loads(msg.data))


def revoked_ws(code: int | None, reason: str, resume: str) -> None:
    assert code == 4403, (code, reason)
    assert reason == f"token revoked; use another token and resume with since={resume}", reason


def revoked_sse(last: bytes, resume: str) -> None:
    expected = b"event: error\ndata: token revoked; use another token and resume with "
    assert last == expected + f"Last-Event-ID: {resume}".encode(), last


def figure(what: str, started: float, ended: float) -> float:
    elapsed = ended - started
    print(f"revocation figure: {what}: {elapsed * 1000:.1f} ms")
    assert elapsed <= _bound(), (what, elapsed)
    return elapsed


# -- one process ------------------------------------------------------------------------


# The lean path serves only open topics (a request with a token goes to aiohttp's): with
# it on, a token's streams end as documented, and an open topic's lean stream goes on.
@pytest.mark.parametrize(
    "hub_settings",
    [{**SETTINGS, "lean_sse": True}, {**SETTINGS, "lean_sse": False}],
    ids=["lean-on", "lean-off"],
)
async def test_a_revoked_read_token_ends_its_websocket_and_sse_streams_within_a_second(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    session, url = hub.session, hub.url
    first = await publish(session, url, "secret", 0)
    secret = f"{url}/topics/secret"
    ws = await session.ws_connect(f"{secret}/ws?since=0&access_token={READER}")
    witness = await session.ws_connect(f"{secret}/ws?since=0&access_token={WITNESS}")
    by_header = await session.get(f"{secret}/events?since=0", headers=bearer(READER))
    by_query = await session.get(f"{secret}/events?since=0&access_token={READER}")
    open_stream = await session.get(f"{url}/topics/open/events")  # lean when on: no token
    try:
        for stream in (ws, witness):
            assert [e["id"] for e in await next_message(stream)] == [first]
        for resp in (by_header, by_query):
            assert resp.status == 200
            await asyncio.wait_for(resp.content.readuntil(b"data: {"), 5 * TIME_SCALE)
        assert open_stream.status == 200
        await asyncio.wait_for(open_stream.content.readuntil(b"retry:"), 5 * TIME_SCALE)
        ends = [asyncio.create_task(sse_end(r)) for r in (by_header, by_query)]
        ws_end = asyncio.create_task(until_closed(ws))
        started = time.time()
        answer = await admin(session, url, "POST", json={"token": READER})
        assert answer["fingerprint"] == fingerprint(READER) and answer["topic"] is None
        assert answer["new"] is True and answer["jti"] is None
        code, reason, ended = await ws_end
        revoked_ws(code, reason, first)
        figure("WebSocket, same process", started, ended)
        for how, end in zip(("header", "query"), ends, strict=True):
            last, ended = await end
            revoked_sse(last, first)
            figure(f"SSE ({how} token), same process", started, ended)
        # Streams of another token, and of an open topic, go on.
        second = await publish(session, url, "secret", 1)
        assert [e["id"] for e in await next_message(witness)] == [second]
        await publish(session, url, "open", 0)
        await asyncio.wait_for(open_stream.content.readuntil(b"data: {"), 5 * TIME_SCALE)
        # The token is refused everywhere it was taken: documents, streams, subscribing.
        await refusal(session, f"{secret}/changelist.xml", READER)
        await refusal(session, f"{secret}/events", READER)
        with pytest.raises(aiohttp.WSServerHandshakeError) as caught:
            await session.ws_connect(f"{secret}/ws?access_token={READER}")
        assert caught.value.status == 403
        async with session.get(f"{secret}/changelist.xml", headers=bearer(WITNESS)) as kept:
            assert kept.status == 200
    finally:
        for stream in (ws, witness):
            await stream.close()
        for resp in (by_header, by_query, open_stream):
            resp.close()
    # Logs name the fingerprint, never the token (the access log masks access_token=).
    assert fingerprint(READER) in caplog.text
    assert READER not in caplog.text and WITNESS not in caplog.text


async def test_a_removed_topic_grant_ends_that_topics_streams_and_no_other(hub: Hub) -> None:
    session, url = hub.session, hub.url
    ids = {topic: await publish(session, url, topic, 0) for topic in ("news", "sport")}
    news = await session.ws_connect(f"{url}/topics/news/ws?since=0&access_token={NEWS}")
    sport = await session.ws_connect(f"{url}/topics/sport/ws?since=0&access_token={NEWS}")
    news_sse = await session.get(f"{url}/topics/news/events?since=0", headers=bearer(NEWS))
    try:
        for stream in (news, sport):
            await next_message(stream)
        await asyncio.wait_for(news_sse.content.readuntil(b"data: {"), 5 * TIME_SCALE)
        sse = asyncio.create_task(sse_end(news_sse))
        ws_end = asyncio.create_task(until_closed(news))
        started = time.time()
        answer = await admin(session, url, "POST", data={"token": NEWS, "topic": "news"})
        assert (answer["fingerprint"], answer["topic"]) == (fingerprint(NEWS), "news")
        code, reason, ended = await ws_end
        revoked_ws(code, reason, ids["news"])
        figure("WebSocket of the topic whose grant went", started, ended)
        last, ended = await sse
        revoked_sse(last, ids["news"])
        figure("SSE of the topic whose grant went", started, ended)
        # The same token's other topic: its stream goes on, and it still reads it.
        later = await publish(session, url, "sport", 1)
        assert [e["id"] for e in await next_message(sport)] == [later]
        body = await refusal(session, f"{url}/topics/news/resourcelist.xml", NEWS)
        assert "for topic 'news'" in body["error"]
        async with session.get(f"{url}/topics/sport/events", headers=bearer(NEWS)) as resp:
            assert resp.status == 200
        # The Source Description lists what it may still read.
        well_known = f"{url}/.well-known/resourcesync"
        async with session.get(well_known, headers=bearer(NEWS)) as resp:
            listed = await resp.text()
        assert "/topics/sport/" in listed and "/topics/news/" not in listed
    finally:
        for stream in (news, sport):
            await stream.close()
        news_sse.close()


async def test_a_signed_read_token_is_revoked_by_its_fingerprint_or_its_jti(hub: Hub) -> None:
    session, url = hub.session, hub.url
    first = await publish(session, url, "secret", 0)
    by_fingerprint = mint(KEY, ["secret"], 600)
    by_jti = mint(KEY, ["secret"], 600, jti="visitor-42")
    streams = {}
    for name, token in (("fingerprint", by_fingerprint), ("jti", by_jti)):
        streams[name] = await session.ws_connect(
            f"{url}/topics/secret/ws?since=0&access_token={token}"
        )
        await next_message(streams[name])
    try:
        for name, fields in (
            ("fingerprint", {"fingerprint": fingerprint(by_fingerprint).upper()}),
            ("jti", {"jti": "visitor-42"}),
        ):
            end = asyncio.create_task(until_closed(streams[name]))
            started = time.time()
            answer = await admin(session, url, "POST", json=fields)
            code, reason, ended = await end
            revoked_ws(code, reason, first)
            figure(f"signed read token by {name}", started, ended)
            assert answer["jti"] == ("visitor-42" if name == "jti" else None)
        for token in (by_fingerprint, by_jti):
            await refusal(session, f"{url}/topics/secret/changelist.xml", token)
        # Another token of the same key and topic is untouched.
        fresh = mint(KEY, ["secret"], 600)
        async with session.get(f"{url}/topics/secret/changelist.xml", headers=bearer(fresh)) as r:
            assert r.status == 200
    finally:
        for stream in streams.values():
            await stream.close()


async def subscribe(
    session: aiohttp.ClientSession, url: str, callback: CallbackServer, token: str
) -> None:
    form = {
        "hub.mode": "subscribe",
        "hub.topic": f"{url}/topics/secret",
        "hub.callback": callback.url,
    }
    async with session.post(url + "/", data=form, headers=bearer(token)) as resp:
        assert resp.status == 202, await resp.text()


def denials(callback: CallbackServer) -> list[dict[str, str]]:
    return [v for v in callback.verifications if v.get("hub.mode") == "denied"]


@pytest.fixture
async def callbacks() -> AsyncIterator[list[CallbackServer]]:
    servers = [await CallbackServer().start() for _ in range(2)]
    yield servers
    for server in servers:
        await server.stop()


async def test_a_websub_subscription_made_with_a_revoked_token_is_removed_and_told(
    hub: Hub, callbacks: list[CallbackServer]
) -> None:
    session, url = hub.session, hub.url
    revoked, witness = callbacks
    await subscribe(session, url, revoked, READER)
    await subscribe(session, url, witness, WITNESS)
    await wait_for(lambda: len(revoked.verifications) == len(witness.verifications) == 1)
    workers = hub.app[RUNTIME].delivery.workers
    await wait_for(lambda: len(workers) == 2)
    await publish(session, url, "secret", 0)
    await wait_for(lambda: revoked.locs and witness.locs)
    started = time.time()
    await admin(session, url, "POST", json={"token": READER, "topic": "secret"})
    await wait_for(lambda: denials(revoked), timeout=BOUND_UNSCALED)
    figure("WebSub denial, same process", started, time.time())
    assert denials(revoked)[0]["hub.reason"].startswith("token revoked")
    assert not denials(witness)
    for i in (1, 2):  # the witness gets each change, the revoked subscription nothing more
        await publish(session, url, "secret", i)
        await wait_for(lambda i=i: f"http://example.org/r{i}" in witness.locs)
    assert revoked.locs == ["http://example.org/r0"]
    async with session.get(f"{url}/admin/subscriptions?topic=secret", headers=ADMIN) as resp:
        listed = [s["callback"] for s in (await resp.json())["subscriptions"]]
    assert listed == [witness.url]
    form = {"hub.mode": "subscribe", "hub.topic": f"{url}/topics/secret"}
    async with session.post(
        url + "/", data={**form, "hub.callback": revoked.url}, headers=bearer(READER)
    ) as resp:
        assert resp.status == 403 and "revoked" in (await resp.json())["error"]


async def test_a_resubscription_with_another_token_outlives_the_old_tokens_revocation(
    hub: Hub, callbacks: list[CallbackServer], caplog: pytest.LogCaptureFixture
) -> None:
    """The subscriber re-subscribed with a new token just before the old one was revoked:
    the record says the new token, while the worker (not yet restarted) still holds the old
    record. The revocation must end what the old token made, not the new subscription."""
    caplog.set_level(logging.INFO, logger="hub.live.delivery")
    session, url = hub.session, hub.url
    callback = callbacks[0]
    await subscribe(session, url, callback, READER)
    workers = hub.app[RUNTIME].delivery.workers
    await wait_for(lambda: len(workers) == 1)
    field = callback.url
    record = orjson.loads(await hub.redis.hget(keys.subscriptions("secret"), field))
    assert record["token_fingerprint"] == fingerprint(READER)
    # The re-subscription's record, stored as its verification ends (the worker is told
    # after: the window this test holds open).
    record["token_fingerprint"] = fingerprint(WITNESS)
    await hub.redis.hset(keys.subscriptions("secret"), field, orjson.dumps(record))
    await admin(session, url, "POST", json={"token": READER, "topic": "secret"})
    # The old token's worker ended, and the revocation's removal is done, either way.
    await wait_for(lambda: "made with a revoked token" in caplog.text or "removed:" in caplog.text)
    assert "was replaced meanwhile: the new one stays" in caplog.text, caplog.text
    stored = await hub.redis.hget(keys.subscriptions("secret"), field)
    assert stored is not None and orjson.loads(stored)["token_fingerprint"] == fingerprint(WITNESS)
    assert not denials(callback)  # a denial would tell the subscriber its new one is gone
    # The new subscription delivers again (its worker starts on the next ownership round).
    await publish(session, url, "secret", 0)
    await wait_for(lambda: callback.locs == ["http://example.org/r0"])


async def test_a_revoked_publisher_token_may_not_publish_nor_ping(hub: Hub) -> None:
    session, url = hub.session, hub.url
    await admin(session, url, "POST", json={"token": PUBLISHER, "topic": "news"})
    body = notification(changes(1))
    headers = {"Content-Type": "application/xml", **PUB}
    async with session.post(f"{url}/topics/news", data=body, headers=headers) as resp:
        assert resp.status == 403 and "revoked for topic 'news'" in (await resp.json())["error"]
    ping = {"hub.mode": "publish", "hub.url": f"{url}/topics/news"}
    async with session.post(url + "/", data=ping, headers=PUB) as resp:
        assert resp.status == 403 and "revoked" in (await resp.json())["error"]
    await publish(session, url, "sport", 0)  # its other topics: as before
    async with session.get(f"{url}/admin/overview.json", headers=PUB) as resp:
        assert resp.status == 200  # still a hub-wide token
    await admin(session, url, "POST", json={"token": PUBLISHER})
    async with session.post(f"{url}/topics/sport", data=body, headers=headers) as resp:
        assert resp.status == 403 and "revoked" in (await resp.json())["error"]
    async with session.get(f"{url}/admin/overview.json", headers=PUB) as resp:
        assert resp.status == 403 and "revoked" in (await resp.json())["error"]
    for fields in ({"token": PUBLISHER, "topic": "news"}, {"token": PUBLISHER}):
        lifted = await admin(session, url, "DELETE", json=fields)
        assert lifted["lifted"] is True and lifted["fingerprint"] == fingerprint(PUBLISHER)
    await publish(session, url, "news", 1)
    listed = await admin(session, url, "GET")
    assert listed["revocations"] == [] and listed["version"] == 4


def rshub(*argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RSHUB_")}
    return subprocess.run(
        [sys.executable, "-m", "rshub", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=30 * TIME_SCALE,
        env={**env, "RSHUB_ADMIN_TOKEN": ADMIN_TOKEN},
    )


async def test_the_cli_revokes_lists_and_lifts_and_the_token_comes_back(hub: Hub) -> None:
    session, url = hub.session, hub.url
    changelist = f"{url}/topics/secret/changelist.xml"
    await publish(session, url, "secret", 0)
    done = await asyncio.to_thread(rshub, "token", "revoke", "-", "--hub", url, stdin=READER)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"revoked\tfingerprint\t{fingerprint(READER)}\t*\t")
    await refusal(session, changelist, READER)
    done = await asyncio.to_thread(rshub, "token", "revocations", "--hub", url)
    assert done.returncode == 0 and done.stdout.count("\n") == 1, done
    assert done.stdout.startswith(f"fingerprint\t{fingerprint(READER)}\t*\t")
    again = ("--fingerprint", fingerprint(READER))
    done = await asyncio.to_thread(rshub, "token", "revoke", *again, "--hub", url)
    assert done.stdout.startswith("revoked already\t"), done
    done = await asyncio.to_thread(rshub, "token", "lift", READER, "--hub", url)
    assert done.returncode == 0 and done.stdout.startswith("lifted\tfingerprint\t"), done
    async with session.get(changelist, headers=bearer(READER)) as resp:
        assert resp.status == 200
    done = await asyncio.to_thread(rshub, "token", "lift", READER, "--hub", url)
    assert done.returncode == 1 and "404: no revocation" in done.stderr, done
    done = await asyncio.to_thread(rshub, "token", "revoke", "--hub", url)
    assert done.returncode == 2 and "exactly one of TOKEN" in done.stderr, done
    done = await asyncio.to_thread(rshub, "token", "revoke", "--jti", "a b", "--hub", url)
    assert done.returncode == 2 and "--jti" in done.stderr, done
    assert (await admin(session, url, "GET"))["revocations"] == []
    # A signed token's revocation ends with it (read here: the hub sees a fingerprint);
    # --expires says when otherwise, and a static token's, without it, never ends.
    signed = mint(KEY, ["secret"], 600)
    done = await asyncio.to_thread(rshub, "token", "revoke", "-", "--hub", url, stdin=signed)
    assert done.returncode == 0, done.stderr
    ends = datetime.fromisoformat(done.stdout.rstrip("\n").split("\t")[-1]).timestamp()
    assert abs(ends - (time.time() + 610)) < 5, done.stdout
    later = ("--expires", "2099-01-01T00:00:00Z", "--hub", url)
    done = await asyncio.to_thread(rshub, "token", "revoke", "-", *later, stdin=READER)
    assert done.stdout.rstrip("\n").endswith("\t2099-01-01T00:00:00+00:00"), done
    done = await asyncio.to_thread(rshub, "token", "revoke", "-", "--hub", url, stdin=NEWS)
    assert done.stdout.rstrip("\n").endswith("\tnever"), done


async def test_the_admin_api_refuses_without_admin_rights(hub: Hub) -> None:
    session, url = hub.session, hub.url
    for method in ("GET", "POST", "DELETE"):
        body = {} if method == "GET" else {"json": {"token": READER}}
        await admin(session, url, method, 401, headers={}, **body)
        for token in (READER, PUBLISHER, "nope"):
            refused = await admin(session, url, method, 403, bearer(token), **body)
            assert "admin API" in refused["error"]
    assert (await admin(session, url, "GET"))["revocations"] == []
    admin_fields = {"fingerprint": fingerprint(ADMIN_TOKEN)}
    body = await admin(session, url, "POST", 400, json=admin_fields)
    assert "admin token is not revocable" in body["error"]


class TestWithoutAdminToken:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"tokens": [PUBLISHER]}

    async def test_a_hub_with_publisher_tokens_needs_an_admin_token(self, hub: Hub) -> None:
        body = await admin(hub.session, hub.url, "POST", 403, PUB, json={"token": READER})
        assert "--admin-token" in body["error"]


class TestOpenHub:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {}

    async def test_loopback_tools_may_and_other_sites_pages_may_not(self, hub: Hub) -> None:
        session, url = hub.session, hub.url
        evil = {"Origin": "https://evil.example"}
        body = await admin(session, url, "POST", 403, evil, json={"token": READER})
        assert body["header"] == "Origin"
        rebinding = {"Host": f"evil.example:{hub.settings.port}"}
        body = await admin(session, url, "GET", 403, rebinding)
        assert body["header"] == "Host"
        answer = await admin(session, url, "POST", 200, {}, json={"token": READER})
        assert answer["new"] is True


# -- hostile bodies ------------------------------------------------------------------------

_FORM = {"Content-Type": "application/x-www-form-urlencoded"}
_NAMED: list[tuple[str, dict[str, Any], int, str]] = [
    ("not JSON", {"data": b"{", "headers": {"Content-Type": "application/json"}}, 400, "JSON"),
    ("a JSON array", {"json": ["token", READER]}, 400, "object"),
    ("no name", {"json": {"topic": "news"}}, 400, "exactly one of"),
    ("two names", {"json": {"token": READER, "jti": "j"}}, 400, "exactly one of"),
    ("a misspelt topic", {"json": {"token": READER, "topics": "news"}}, 400, "'topics'"),
    ("a number", {"json": {"token": 5}}, 400, "must be a string"),
    ("null topic", {"json": {"token": READER, "topic": None}}, 400, "must be a string"),
    ("a nested object", {"json": {"token": {"token": READER}}}, 400, "must be a string"),
    ("a token with a space", {"json": {"token": "a b"}}, 400, "visible ASCII"),
    ("a token too long", {"json": {"token": "t" * 4097}}, 400, "1-4096"),
    ("a short fingerprint", {"json": {"fingerprint": "ab" * 31}}, 400, "64 hex digits"),
    ("a jti with NUL", {"json": {"jti": "a\x00b"}}, 400, "a jti is"),
    ("a topic with a slash", {"json": {"token": READER, "topic": "a/b"}}, 400, "topic:"),
    ("a form field twice", {"data": "token=a&token=b", "headers": _FORM}, 400, "given twice"),
    ("a form not in UTF-8", {"data": b"token=\xff", "headers": _FORM}, 400, "not valid UTF-8"),
    ("text/plain", {"data": "token=a", "headers": {"Content-Type": "text/plain"}}, 415, "JSON"),
    ("no body", {}, 415, "JSON"),
    ("too large", {"json": {"token": "t" * 20000}}, 413, "bytes"),
    (
        "gzip that is not",
        {
            "data": b"not gzip",
            "headers": {"Content-Type": "application/json", "Content-Encoding": "gzip"},
        },
        400,
        "gzip",
    ),
]


@pytest.mark.parametrize(("case", "kwargs", "status", "said"), _NAMED, ids=[c[0] for c in _NAMED])
async def test_a_bad_revocation_request_is_refused_naming_the_problem(
    hub: Hub, case: str, kwargs: dict[str, Any], status: int, said: str
) -> None:
    extra = dict(kwargs)
    headers = {**ADMIN, **extra.pop("headers", {})}
    for method in ("POST", "DELETE"):
        body = await admin(hub.session, hub.url, method, status, headers, **extra)
        assert said in body["error"], (case, body)
        assert "t" * 100 not in body["error"]  # nothing long echoed back
    assert (await admin(hub.session, hub.url, "GET"))["revocations"] == []


_ODD_NAMES = ["topics", "", "token ", "TOKEN", "é", "fingerprint", "jti", "token", "topic"]
_ODD_VALUES: list[Any] = [
    "",
    " ",
    "a b",
    "\x00",
    "é",
    "x" * 4097,
    "G" * 64,
    "0" * 63,
    "a/b",
    5,
    None,
    True,
    [],
    {"token": READER},
    1e308,
]


def _fuzzed(rng: random.Random) -> dict[str, Any]:
    """A revocation body: a valid one, mutated a few times (a field added, dropped or
    renamed, a value replaced), sent as JSON, a form, or bytes said to be JSON."""
    name = rng.choice(["token", "fingerprint", "jti"])
    value = {"token": READER, "fingerprint": fingerprint(READER), "jti": "visitor-1"}[name]
    fields: dict[str, Any] = {name: value}
    if rng.random() < 0.5:
        fields["topic"] = rng.choice(["news", "sport", "secret"])
    for _ in range(rng.choice([0, 0, 1, 1, 2, 3])):
        mutation = rng.randrange(4)
        if mutation == 0:
            fields[rng.choice(_ODD_NAMES)] = rng.choice([*_ODD_VALUES, READER, "news"])
        elif mutation == 1 and fields:
            del fields[rng.choice(list(fields))]
        elif mutation == 2 and fields:
            fields[rng.choice(list(fields))] = rng.choice(_ODD_VALUES)
        elif fields:
            key = rng.choice(list(fields))
            fields[key.upper() if rng.random() < 0.5 else key + "s"] = fields.pop(key)
    shape = rng.randrange(6)
    if shape <= 2:
        return {"json": fields}
    if shape <= 4:  # a form of the fields, as text
        return {"data": {k: str(v) for k, v in fields.items()}}
    if rng.random() < 0.5:  # raw bytes said to be JSON
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 200)))
        return {"data": raw, "headers": {"Content-Type": "application/json"}}
    text = orjson.dumps(rng.choice([[fields], "token", 7, None]))
    return {"data": text, "headers": {"Content-Type": "application/json"}}


async def test_a_seeded_fuzz_of_revocation_bodies_stalls_nothing_and_stores_only_valid_ones(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    rng = random.Random(2026_12_02)
    session, url = hub.session, hub.url
    stored: set[tuple[Any, ...]] = set()
    statuses: dict[int, int] = {}
    # Warm up: the client's kept-alive connection and the hub's pooled Redis connections
    # (a revocation's script and the periodic check may each hold one) are not leaks.
    await admin(session, url, "POST", json={"jti": "warm-up"})
    await admin(session, url, "DELETE", json={"jti": "warm-up"})
    async with Watchdog() as dog:
        for _ in range(400):
            method = rng.choice(["POST", "POST", "DELETE"])
            kwargs = _fuzzed(rng)
            headers = {**ADMIN, **kwargs.pop("headers", {})}
            async with session.request(
                method, f"{url}/admin/revocations", headers=headers, **kwargs
            ) as resp:
                body = await resp.json()
                statuses[resp.status] = statuses.get(resp.status, 0) + 1
                assert resp.status in (200, 400, 404, 413, 415), (kwargs, body)
                assert resp.status == 200 or body["error"], body
            if resp.status == 200:
                key = (body["fingerprint"], body["jti"], body["topic"])
                if method == "POST":
                    stored.add(key)
                else:
                    stored.discard(key)
    await dog.sockets_back(slack=2)  # two more pooled Redis connections at most
    listed = await admin(session, url, "GET")
    assert {(r["fingerprint"], r["jti"], r["topic"]) for r in listed["revocations"]} == stored
    print(f"fuzz answers by status: {statuses}, revocations left: {len(stored)}")
    assert statuses.get(200, 0) > 10 and statuses.get(400, 0) > 100  # both outcomes reached
    assert "Traceback" not in caplog.text and READER not in caplog.text


async def test_a_full_store_is_409_and_a_field_the_hub_did_not_write_is_left_out(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    session, url = hub.session, hub.url
    mapping = {f"jti filler-{i} *": '{"at": 1.0}' for i in range(MAX_REVOCATIONS - 1)}
    mapping["garbage"] = "not json"  # another program's: said once, left out
    await hub.redis.hset(keys.REVOCATIONS, mapping=mapping)
    await hub.redis.incr(keys.REVOCATIONS_VERSION)
    body = await admin(session, url, "POST", 409, json={"token": READER})
    assert "at most 10000" in body["error"]
    await admin(session, url, "DELETE", json={"jti": "filler-0"})
    answer = await admin(session, url, "POST", json={"token": READER})
    assert answer["new"] is True
    await refusal(session, f"{url}/topics/secret/changelist.xml", READER)
    listed = await admin(session, url, "GET")
    assert len(listed["revocations"]) == MAX_REVOCATIONS - 1  # the garbage left out
    assert caplog.text.count("revocation 'garbage' is damaged") == 1


async def test_a_revocation_with_an_expiry_ends_by_itself_and_is_forgotten(hub: Hub) -> None:
    """Revocations need not be kept for ever: one given ``expires`` stops applying then on
    every process (within ``revocation_check_seconds``), leaves the listing, and the next
    revoke removes it from Redis; a signed token's ends with the token by default."""
    session, url = hub.session, hub.url
    await publish(session, url, "secret", 0)
    page = f"{url}/topics/secret/changelist.xml"
    soon = time.time() + 2 * TIME_SCALE
    expires = datetime.fromtimestamp(soon, UTC).isoformat()
    answer = await admin(session, url, "POST", json={"token": READER, "expires": expires})
    assert answer["expires_at"] == pytest.approx(soon, abs=1e-3), answer
    await refusal(session, page, READER)

    async def readable() -> bool:
        async with session.get(page, headers=bearer(READER)) as resp:
            return resp.status == 200

    await wait_for(readable, timeout=10)
    assert time.time() >= soon  # not before its time
    assert (await admin(session, url, "GET"))["revocations"] == []
    assert await hub.redis.hlen(keys.REVOCATIONS) == 1  # still stored: nothing forgot it yet
    # A signed read token's revocation ends with the token: its exp plus the leeway.
    token = mint(KEY, ["secret"], 600)
    signed = await admin(session, url, "POST", json={"token": token})
    assert signed["new"] is True
    assert signed["expires_at"] == pytest.approx(time.time() + 600 + 10, abs=5)
    assert await hub.redis.hlen(keys.REVOCATIONS) == 1  # the expired one forgotten
    await refusal(session, page, token)
    # An expiry in the past, or without its offset, is refused naming the field.
    for bad in ("2020-01-01T00:00:00Z", "2099-01-01T00:00:00"):
        body = await admin(session, url, "POST", 400, json={"token": NEWS, "expires": bad})
        assert body.get("field") == "expires", body


# -- several processes ---------------------------------------------------------------------


def _env() -> dict[str, str]:
    return {
        "RSHUB_TOKENS": json.dumps([PUBLISHER]),
        "RSHUB_TOPIC_READ_TOKENS": json.dumps(SETTINGS["topic_read_tokens"]),
        "RSHUB_JWT_KEY": KEY,
        "RSHUB_ADMIN_TOKEN": ADMIN_TOKEN,
        "RSHUB_ALLOW_PRIVATE_CALLBACKS": "true",
        "RSHUB_ACCESS_LOG": "true",
        "RSHUB_LOG_LEVEL": "DEBUG",
    }


def _whole_log(hub: HubProcess) -> str:
    return (Path(hub.data_dir) / "hub.log").read_text(errors="replace")


async def _node(session: aiohttp.ClientSession, hub: HubProcess) -> str:
    async with session.get(f"{hub.url}/healthz", headers=ADMIN) as resp:
        return str((await resp.json())["node"])


@pytest.mark.timeout(180)
async def test_revocations_reach_every_hub_process_on_the_redis_within_a_second(
    tmp_path: Path, redis_url: str, session: aiohttp.ClientSession
) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for path in dirs:
        path.mkdir()
    a, b = (HubProcess(str(d), None, "--redis-url", redis_url, env=_env()) for d in dirs)
    await asyncio.gather(asyncio.to_thread(a.start), asyncio.to_thread(b.start))
    callbacks = [await CallbackServer().start() for _ in range(6)]
    witness_cb = await CallbackServer().start()
    streams: list[aiohttp.ClientWebSocketResponse] = []
    sse: aiohttp.ClientResponse | None = None
    signed = mint(KEY, ["secret"], 600, jti="visitor-42")
    try:
        await publish(session, a.url, "secret", 0)
        news_first = await publish(session, a.url, "news", 0)
        await publish(session, a.url, "sport", 0)
        # Every stream on process b; every revocation taken by process a.
        urls = {
            "reader": f"{b.url}/topics/secret/ws?since=0&access_token={READER}",
            "witness": f"{b.url}/topics/secret/ws?since=0&access_token={WITNESS}",
            "news": f"{b.url}/topics/news/ws?since=0&access_token={NEWS}",
            "sport": f"{b.url}/topics/sport/ws?since=0&access_token={NEWS}",
            "signed": f"{b.url}/topics/secret/ws?since=0&access_token={signed}",
        }
        ws = {name: await session.ws_connect(u) for name, u in urls.items()}
        streams.extend(ws.values())
        for stream in ws.values():
            await next_message(stream)
        sse = await session.get(f"{b.url}/topics/secret/events?since=0", headers=bearer(READER))
        await asyncio.wait_for(sse.content.readuntil(b"data: {"), 5 * TIME_SCALE)
        # WebSub: six subscriptions made with the token, placed over both processes.
        for callback in callbacks:
            await subscribe(session, b.url, callback, READER)
        await subscribe(session, b.url, witness_cb, WITNESS)
        second = await publish(session, a.url, "secret", 1)  # the secret streams' last
        assert [e["id"] for e in await next_message(ws["witness"])] == [second]
        await wait_for(lambda: all(c.locs for c in [*callbacks, witness_cb]), timeout=20)
        owners = {c.deliveries[-1].headers["X-RSHub-Node"] for c in callbacks}
        nodes = {await _node(session, a): "a", await _node(session, b): "b"}
        print(f"subscriptions delivered by: {sorted(nodes[n] for n in owners)}")

        ends = {
            "reader": asyncio.create_task(until_closed(ws["reader"])),
            "sse": asyncio.create_task(sse_end(sse)),
        }
        started = time.time()
        await admin(session, a.url, "POST", json={"token": READER})
        code, reason, ended = await ends["reader"]
        revoked_ws(code, reason, second)
        figure("WebSocket on another process", started, ended)
        last, ended = await ends["sse"]
        revoked_sse(last, second)
        figure("SSE on another process", started, ended)

        async def denied(callback: CallbackServer) -> float:
            await wait_for(lambda: denials(callback), timeout=BOUND_UNSCALED)
            return time.time()

        told = await asyncio.gather(*(denied(c) for c in callbacks))
        for callback, at in zip(callbacks, told, strict=True):
            owner = nodes[callback.deliveries[-1].headers["X-RSHub-Node"]]
            figure(f"WebSub denial, subscription delivered by {owner}", started, at)

        end = asyncio.create_task(until_closed(ws["news"]))
        started = time.time()
        await admin(session, a.url, "POST", json={"token": NEWS, "topic": "news"})
        code, reason, ended = await end
        revoked_ws(code, reason, news_first)
        figure("topic grant removed, WebSocket on another process", started, ended)

        end = asyncio.create_task(until_closed(ws["signed"]))
        started = time.time()
        await admin(session, a.url, "POST", json={"jti": "visitor-42"})
        code, reason, ended = await end
        revoked_ws(code, reason, second)
        figure("signed read token by jti, WebSocket on another process", started, ended)

        # What was not revoked goes on; what was is delivered no more.
        later = await publish(session, a.url, "secret", 2)
        assert [e["id"] for e in await next_message(ws["witness"])] == [later]
        await publish(session, a.url, "sport", 1)
        await next_message(ws["sport"])
        await wait_for(lambda: "http://example.org/r2" in witness_cb.locs)
        assert all("http://example.org/r2" not in c.locs for c in callbacks)

        # The revocations are in Redis: a restarted process refuses the token at once.
        await asyncio.to_thread(b.stop)
        await asyncio.to_thread(b.start)
        await refusal(session, f"{b.url}/topics/secret/changelist.xml", READER)
        await refusal(session, f"{b.url}/topics/news/changelist.xml", NEWS)
        # Lifting, on process b, lets the token back in on process a within the bound.
        started = time.time()
        await admin(session, b.url, "DELETE", json={"token": READER})

        async def taken() -> bool:
            changelist = f"{a.url}/topics/secret/changelist.xml"
            async with session.get(changelist, headers=bearer(READER)) as resp:
                return resp.status == 200

        await wait_for(taken, timeout=BOUND_UNSCALED)
        figure("lifted on b, taken again on a", started, time.time())
    finally:
        for stream in streams:
            await stream.close()
        if sse is not None:
            sse.close()
        for callback in [*callbacks, witness_cb]:
            await callback.stop()
        await asyncio.gather(asyncio.to_thread(a.stop), asyncio.to_thread(b.stop))
    logs = _whole_log(a) + _whole_log(b)
    for secret in (*SECRETS, signed):
        assert secret not in logs, secret
    assert f"revoked fingerprint {fingerprint(READER)} for every topic" in _whole_log(a)
    assert "Traceback" not in logs


async def test_revocations_work_on_a_redis_cluster(redis_cluster: RedisClusterProcesses) -> None:
    for _, port in redis_cluster.nodes:
        node = redis_cluster.client(port)
        node.flushall()
        node.close()
    host, port = redis_cluster.nodes[0]
    settings = Settings(host="127.0.0.1", port=free_port(), **SETTINGS)
    runner, _app = await start_hub(settings, f"redis+cluster://{host}:{port}")
    try:
        async with aiohttp.ClientSession() as session:
            url = settings.public_url
            await publish(session, url, "secret", 0)
            await admin(session, url, "POST", json={"token": READER, "topic": "secret"})
            await refusal(session, f"{url}/topics/secret/changelist.xml", READER)
            listed = await admin(session, url, "GET")
            assert [r["topic"] for r in listed["revocations"]] == ["secret"]
            await admin(session, url, "DELETE", json={"token": READER, "topic": "secret"})
            changelist = f"{url}/topics/secret/changelist.xml"
            async with session.get(changelist, headers=bearer(READER)) as resp:
                assert resp.status == 200
    finally:
        await runner.cleanup()
