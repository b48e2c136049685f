"""Short-lived signed read tokens (JWT) against a real hub: documents, streams, WebSub,
discovery, the ``rshub token`` command, and hostile tokens."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import random
import sys
import time
from typing import Any

import aiohttp
import jwt
import orjson
import pytest

from hub.core.read_tokens import mint
from rshub.cli import main
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_read_access import PUB, status
from tests.support import changes, notification, wait_for
from tests.watchdog import Watchdog

KEY = "the-hub's-signing-key-0123456789abcdef"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"tokens": ["pub"], "read_tokens": ["r"], "jwt_key": KEY}


@pytest.fixture
async def published(hub: Hub) -> Hub:
    for topic in ("secret", "other"):
        assert (await hub.publish(topic, notification(changes(2)), **PUB)).status == 202
    return hub


async def error(hub: Hub, path: str, token: str) -> tuple[int, str]:
    async with hub.session.get(hub.url + path, headers=bearer(token)) as resp:
        return resp.status, (await resp.json())["error"]


async def test_a_signed_token_reads_its_topics_and_no_other(published: Hub) -> None:
    hub = published
    token = mint(KEY, ["secret"], 60)
    for doc in ("", "/capabilitylist.xml", "/changelist.xml", "/resourcelist.xml"):
        assert await status(hub, f"/topics/secret{doc}", bearer(token)) == 200, doc
        code, message = await error(hub, f"/topics/other{doc}", token)
        assert code == 403 and "'secret'" in message and "'other'" in message
    async with hub.session.get(hub.url + "/.well-known/resourcesync", headers=bearer(token)) as r:
        listed = await r.text()
    assert "/topics/secret/" in listed and "/topics/other/" not in listed


NOW = time.time()
BAD_TOKENS = {
    "expired": (jwt.encode({"topics": ["secret"], "exp": NOW - 3600}, KEY), 401, "expired"),
    "wrong key": (
        jwt.encode({"topics": ["secret"], "exp": NOW + 86400}, "x" * 40),
        401,
        "signature",
    ),
    "alg none": (
        jwt.encode({"topics": ["secret"], "exp": NOW + 86400}, None, algorithm="none"),
        401,
        "HS256",
    ),
    "alg HS512": (
        jwt.encode({"topics": ["secret"], "exp": NOW + 86400}, KEY * 2, algorithm="HS512"),
        401,
        "HS256",
    ),
    "no exp": (jwt.encode({"topics": ["secret"]}, KEY), 401, "'exp'"),
    "no topics": (jwt.encode({"exp": NOW + 86400}, KEY), 401, "'topics'"),
    "wrong topic": (jwt.encode({"topics": ["other"], "exp": NOW + 86400}, KEY), 403, "'other'"),
    # exp must be a number, within RSHUB_JWT_MAX_TTL (a day by default) of the hub's clock
    "exp a string": (jwt.encode({"topics": ["secret"], "exp": "9999999999"}, KEY), 401, "'exp'"),
    "exp 1e30": (jwt.encode({"topics": ["secret"], "exp": 1e30}, KEY), 401, "RSHUB_JWT_MAX_TTL"),
    "exp in two days": (
        jwt.encode({"topics": ["secret"], "exp": NOW + 2 * 86400}, KEY),
        401,
        "RSHUB_JWT_MAX_TTL",
    ),
}


@pytest.mark.parametrize("case", BAD_TOKENS)
async def test_a_bad_signed_token_is_refused_naming_the_problem(
    published: Hub, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    hub = published
    caplog.set_level(logging.DEBUG)
    token, code, problem = BAD_TOKENS[case]
    for path in ("/topics/secret/changelist.xml", "/topics/secret/events"):
        got, message = await error(hub, path, token)
        assert got == code and problem in message, (path, message)
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await hub.session.ws_connect(f"{hub.url}/topics/secret/ws?access_token={token}")
    assert refused.value.status == code
    form = {
        "hub.mode": "subscribe",
        "hub.topic": f"{hub.url}/topics/secret",
        "hub.callback": "http://callback.invalid/",
    }
    async with hub.session.post(hub.url + "/", data=form, headers=bearer(token)) as resp:
        assert resp.status == code and problem in (await resp.json())["error"]
    assert KEY not in caplog.text


async def test_streams_take_a_signed_token_in_the_query_as_browsers_must(published: Hub) -> None:
    hub = published
    token = mint(KEY, ["secret"], 60)
    sse = await hub.session.get(f"{hub.url}/topics/secret/events?since=0&access_token={token}")
    ws = await hub.session.ws_connect(f"{hub.url}/topics/secret/ws?since=0&access_token={token}")
    try:
        assert sse.status == 200
        message = await asyncio.wait_for(ws.receive(), 5)
        assert [e["topic"] for e in orjson.loads(message.data)] == ["secret", "secret"]
        line = await asyncio.wait_for(sse.content.readuntil(b"data: "), 5)
        assert b"id: " in line
    finally:
        await ws.close()
        sse.close()


async def test_a_websub_subscription_takes_a_signed_token(published: Hub) -> None:
    hub = published
    callback = await CallbackServer().start()
    try:
        form = {
            "hub.mode": "subscribe",
            "hub.topic": f"{hub.url}/topics/secret",
            "hub.callback": callback.url,
        }
        async with hub.session.post(
            hub.url + "/", data=form, headers=bearer(mint(KEY, ["other"], 60))
        ) as resp:
            assert resp.status == 403
        token = mint(KEY, ["secret"], 60)
        async with hub.session.post(hub.url + "/", data=form, headers=bearer(token)) as resp:
            assert resp.status == 202
        await wait_for(lambda: len(callback.verifications) == 1)
    finally:
        await callback.stop()


async def test_rshub_token_mints_what_the_hub_accepts(published: Hub) -> None:
    hub = published
    env = {**os.environ, "RSHUB_JWT_KEY": KEY}
    process = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "rshub", "token", "--topic", "secret", "--ttl", "15m"],
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    out, _ = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0
    token = out.decode().strip()
    assert await status(hub, "/topics/secret/changelist.xml", bearer(token)) == 200
    claims = jwt.decode(token, KEY, algorithms=["HS256"])
    assert claims["topics"] == ["secret"] and 890 <= claims["exp"] - time.time() <= 900


def test_rshub_token_without_a_usable_key_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RSHUB_JWT_KEY", raising=False)
    for argv, said in [
        ([], "RSHUB_JWT_KEY"),
        (["--key", "tiny-key"], "32 bytes"),
        (["--key", KEY, "--topic", "no/such name"], "topic name"),
        (["--key", KEY, "--ttl", "2d"], "RSHUB_JWT_MAX_TTL: 86400 s"),
    ]:
        assert main(["token", "--topic", "t", *argv]) == 2
        out, err = capsys.readouterr()
        assert said in err and "tiny-key" not in err and not out


def _mutated(rng: random.Random, token: str) -> str:
    header, claims, signature = token.split(".")
    choice = rng.randrange(7)
    if choice == 0:  # flip a character anywhere
        i = rng.randrange(len(token))
        return token[:i] + rng.choice("AZaz09-_.=") + token[i + 1 :]
    if choice == 1:  # forged claims under the real signature
        forged = orjson.dumps({"topics": ["secret", "other"], "exp": 2**40})
        return ".".join([header, base64.urlsafe_b64encode(forged).decode().rstrip("="), signature])
    if choice == 2:  # a header naming another algorithm
        alg = rng.choice(["none", "HS512", "RS256", "ES256", "", "hs256", None])
        forged = base64.urlsafe_b64encode(orjson.dumps({"alg": alg, "typ": "JWT"})).decode()
        return ".".join([forged.rstrip("="), claims, signature])
    if choice == 3:  # claims of the wrong types
        value = rng.choice([["secret"] * 3000, [1, 2], {"a": 1}, None, "secret", 10**30])
        return jwt.encode({"topics": value, "exp": 2**31}, "y" * 40)
    if choice == 4:  # random bytes, dot-separated
        return ".".join(
            "".join(rng.choice("ABCxyz019-_+/=%") for _ in range(rng.randrange(0, 300)))
            for _ in range(3)
        )
    if choice == 5:
        return token + "." + signature
    return ".".join([header, claims, ""])


async def test_a_seeded_fuzz_of_hostile_signed_tokens(published: Hub, redis_url: str) -> None:
    hub = published
    rng = random.Random(2026_11_24)
    good = mint(KEY, ["secret"], 60)
    await status(hub, "/topics/secret/changelist.xml", bearer(good))
    unauthorized = 0
    async with Watchdog() as dog, aiohttp.ClientSession() as session:
        for _ in range(300):
            token = _mutated(rng, good)
            path = rng.choice(["/topics/other/changelist.xml", "/topics/secret/capabilitylist.xml"])
            if rng.random() < 0.3:
                path, headers = f"{path}?access_token={token}", {}
                path = path.replace("changelist.xml", "events").replace(
                    "capabilitylist.xml", "events"
                )
            else:
                headers = bearer(token)
            async with session.get(hub.url + path, headers=headers) as resp:
                if resp.status == 200:  # a mutation that left the token intact
                    assert "/topics/secret/" in path and token.count(".") == 2
                    continue
                assert resp.status in (400, 401, 403), (resp.status, token[:80])
                if resp.status != 400:  # 400: headers too large for the HTTP parser itself
                    assert (await resp.json())["error"]
                unauthorized += resp.status == 401
    assert unauthorized >= 100  # told what is wrong with the token, not just "no"
    # A stream that was let in had its topic's feed open a pooled Redis connection.
    await dog.sockets_back()


def _hostile_exp(rng: random.Random) -> object:
    """An exp no token may carry: not a number, past, or beyond the maximum lifetime."""
    now = time.time()
    return rng.choice(
        [
            str(rng.randrange(10**9, 10**12)),  # digits in a string
            f"{now + 60}",
            rng.choice([1e30, -1e30, 1e308, float("inf"), float("-inf"), float("nan")]),
            10 ** rng.randrange(11, 400),  # an integer of up to 400 digits
            rng.choice([True, False, None, [], {}, [now + 60], {"exp": now + 60}]),
            now + 86400 + 11 + rng.random() * 10**6,  # beyond RSHUB_JWT_MAX_TTL
            now - 11 - rng.random() * 10**6,  # past, the leeway too
            -rng.randrange(1, 10**6),
        ]
    )


async def test_a_seeded_fuzz_of_signed_tokens_with_hostile_exp_on_every_transport(
    published: Hub,
) -> None:
    """Tokens the hub's own key signed, with every kind of bad ``exp``: each is a 401 naming
    the claim (or that it expired), on documents, SSE, WebSocket and WebSub alike."""
    hub = published
    rng = random.Random(2026_12_02)
    async with Watchdog() as dog:
        for i in range(200):
            token = jwt.encode({"topics": ["secret"], "exp": _hostile_exp(rng)}, KEY)
            where = i % 4
            if where == 0:
                status_, body = await error(hub, "/topics/secret/changelist.xml", token)
            elif where == 1:
                url = f"{hub.url}/topics/secret/events?access_token={token}"
                async with hub.session.get(url) as resp:
                    status_, body = resp.status, (await resp.json())["error"]
            elif where == 2:
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await hub.session.ws_connect(f"{hub.url}/topics/secret/ws?access_token={token}")
                status_, body = refused.value.status, "'exp'"  # the handshake's body is gone
            else:
                form = {
                    "hub.mode": "subscribe",
                    "hub.topic": f"{hub.url}/topics/secret",
                    "hub.callback": "http://callback.invalid/",
                }
                async with hub.session.post(
                    hub.url + "/", data=form, headers=bearer(token)
                ) as resp:
                    status_, body = resp.status, (await resp.json())["error"]
            assert status_ == 401, (i, status_, body)
            assert "'exp'" in body or "expired" in body, (i, body)
    assert not dog.errors  # no ERROR line: every refusal is an answer, not a traceback
