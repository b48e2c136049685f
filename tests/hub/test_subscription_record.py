"""A subscription's record (``GET /admin/subscriptions/{id}``): attempt log, last success,
self-service reads signed with ``hub.secret``, against a real hub, Redis and callbacks."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from hub.core.placement import subscription_id
from hub.core.settings import Settings
from hub.web.app import RUNTIME
from rsclient.subscription_identity import signed_headers
from tests.commands import Command
from tests.conftest import Hub, start_hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_websub import subscribe
from tests.redis_cluster import RedisClusterProcesses
from tests.support import changes, free_port, notification, wait_for
from tests.watchdog import Watchdog

ADMIN = {"Authorization": "Bearer adm"}
SECRET = "s3cret-of-the-subscriber"


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"admin_token": "adm", "retry_base_seconds": 0.02, "retry_max_seconds": 0.05}


@pytest.fixture
async def callback() -> AsyncIterator[CallbackServer]:
    server = await CallbackServer().start()
    yield server
    await server.stop()


def path_of(topic: str, callback: str) -> str:
    return f"/admin/subscriptions/{subscription_id(topic, callback)}"


async def get(hub: Hub, path: str, status: int, headers: dict[str, str]) -> dict[str, Any]:
    async with hub.session.get(hub.url + path, headers=headers) as resp:
        body = await resp.json()
        assert resp.status == status, body
        return dict(body)


async def record(hub: Hub, topic: str, callback: str) -> dict[str, Any]:
    return await get(hub, path_of(topic, callback), 200, ADMIN)


async def attempts_logged(
    hub: Hub, topic: str, callback: str, n: int, newest: int | None = None
) -> list[dict[str, Any]]:
    """The logged attempts once there are ``n`` (and the newest has status ``newest``)."""
    found: list[dict[str, Any]] = []

    async def enough() -> bool:
        found[:] = (await record(hub, topic, callback))["attempts"]
        return len(found) >= n and (newest is None or found[0]["status"] == newest)

    await wait_for(enough)
    return found


async def test_the_record_shows_each_attempt_and_the_last_success(
    hub: Hub, callback: CallbackServer
) -> None:
    callback.statuses = [500, 503]
    await subscribe(hub, callback, **{"hub.secret": SECRET})
    ids = (await (await hub.publish("t", notification(changes(3)))).json())["ids"]
    await wait_for(lambda: callback.ids == ids)
    sub_id = subscription_id("t", callback.url)
    assert callback.deliveries[0].headers["X-RSHub-Subscription"] == sub_id

    newest, retry, first = await attempts_logged(hub, "t", callback.url, 3, newest=204)
    body = await record(hub, "t", callback.url)
    assert body["id"] == sub_id and body["callback"] == callback.url
    assert body["state"] == "active" and body["secret"] is True and SECRET not in str(body)
    assert (first["status"], first["error"]) == (500, "HTTP 500")
    assert (retry["status"], retry["error"]) == (503, "HTTP 503")
    assert (newest["status"], newest["error"]) == (204, None)
    for attempt in (first, retry, newest):
        assert (attempt["first_event_id"], attempt["last_event_id"]) == (ids[0], ids[-1])
        assert attempt["events"] == 3 and attempt["latency_ms"] >= 0
    assert first["at"] <= retry["at"] <= newest["at"] <= time.time()
    assert body["last_success"]["event_id"] == ids[-1]
    assert body["last_success"]["at"] == newest["at"]

    async def caught_up() -> bool:
        row = await record(hub, "t", callback.url)
        return bool(row["cursor"] == ids[-1] and row["lag_events"] == 0)

    await wait_for(caught_up)


async def test_an_unreachable_callback_logs_why_without_a_status(hub: Hub) -> None:
    dead = await CallbackServer().start()
    await subscribe(hub, dead)
    await dead.stop()  # verified, then gone: every POST is refused at connect
    ids = (await (await hub.publish("t", notification(changes(1)))).json())["ids"]
    first, *_ = reversed(await attempts_logged(hub, "t", dead.url, 2))
    assert first["status"] is None and first["error"]
    assert first["last_event_id"] == ids[0]
    body = await record(hub, "t", dead.url)
    assert body["last_success"] is None and body["last_error"]


class TestBounded:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {
            "admin_token": "adm",
            "retry_base_seconds": 0.01,
            "retry_max_seconds": 0.01,
            "attempt_log_size": 3,
        }

    async def test_only_the_last_attempts_are_kept(
        self, hub: Hub, callback: CallbackServer
    ) -> None:
        callback.statuses = [500] * 12
        await subscribe(hub, callback)
        await hub.publish("t", notification(changes(1)))
        await wait_for(lambda: len(callback.ids) == 1)
        attempts = await attempts_logged(hub, "t", callback.url, 3, newest=204)
        assert len(attempts) == 3  # of 13
        assert [a["status"] for a in attempts] == [204, 500, 500]
        key = f"rshub:{{t}}:attempts:{subscription_id('t', callback.url)}"
        assert await hub.redis.llen(key) == 3


async def test_the_log_goes_with_its_subscription_and_its_topic(
    hub: Hub, callback: CallbackServer
) -> None:
    other = await CallbackServer().start()
    try:
        await subscribe(hub, callback)
        await subscribe(hub, other, topic="u")
        await hub.publish("t", notification(changes(1)))
        await hub.publish("u", notification(changes(1)))
        await attempts_logged(hub, "t", callback.url, 1)
        await attempts_logged(hub, "u", other.url, 1)
        logs = [k async for k in hub.redis.scan_iter(match="rshub:*attempts*")]
        assert len(logs) == 2
        assert await hub.redis.hlen("rshub:{t}:last-success") == 1

        form = {"topic": "t", "callback": callback.url}
        async with hub.session.delete(
            hub.url + "/admin/subscriptions", json=form, headers=ADMIN
        ) as resp:
            assert resp.status == 200
        assert not [k async for k in hub.redis.scan_iter(match="rshub:{t}:attempts*")]
        assert await hub.redis.hlen("rshub:{t}:last-success") == 0
        await get(hub, path_of("t", callback.url), 404, ADMIN)

        async with hub.session.delete(hub.url + "/admin/topics/u", headers=ADMIN) as resp:
            assert resp.status == 200
        assert not [k async for k in hub.redis.scan_iter(match="rshub:*attempts*")]
        assert not await hub.redis.exists("rshub:{u}:last-success")
    finally:
        await other.stop()


async def test_a_fan_out_writes_its_attempts_in_few_rounds(hub: Hub) -> None:
    servers = [await CallbackServer().start(f"/cb{i}") for i in range(12)]
    try:
        for server in servers:
            await subscribe(hub, server)
        writer = hub.app[RUNTIME].delivery.attempts
        before = writer.rounds
        await hub.publish("t", notification(changes(1)))
        await wait_for(lambda: all(len(s.ids) == 1 for s in servers))
        for server in servers:
            await attempts_logged(hub, "t", server.url, 1)
        # One round per gathered batch, not one Redis round trip per POST.
        assert 1 <= writer.rounds - before < len(servers) / 2
    finally:
        for server in servers:
            await server.stop()


# -- self-service ---------------------------------------------------------------------------


async def test_a_subscriber_reads_its_own_record_with_its_secret(
    hub: Hub, callback: CallbackServer
) -> None:
    await subscribe(hub, callback, **{"hub.secret": SECRET})
    await hub.publish("t", notification(changes(1)))
    await attempts_logged(hub, "t", callback.url, 1)
    path = path_of("t", callback.url)
    signed = signed_headers(SECRET, int(time.time()), path)
    body = await get(hub, path, 200, signed)
    assert body["callback"] == callback.url and len(body["attempts"]) == 1
    # The same signature again is a replay.
    replayed = await get(hub, path, 403, signed)
    assert "used before" in replayed["error"]
    # It names its own record only: another subscription's path does not match.
    other = await CallbackServer().start()
    try:
        await subscribe(hub, other, **{"hub.secret": "theirs"})
        other_path = path_of("t", other.url)
        forged = signed_headers(SECRET, int(time.time()), other_path)
        assert "does not match" in (await get(hub, other_path, 403, forged))["error"]
    finally:
        await other.stop()


async def test_bad_signatures_are_refused_naming_the_problem(
    hub: Hub, callback: CallbackServer
) -> None:
    await subscribe(hub, callback, **{"hub.secret": SECRET})
    path = path_of("t", callback.url)
    now = int(time.time())
    good = signed_headers(SECRET, now, path)
    cases: list[tuple[dict[str, str], int, str]] = [
        ({}, 401, "X-RSHub-Signature"),
        ({"X-RSHub-Timestamp": str(now)}, 401, "missing X-RSHub-Signature"),
        ({"X-RSHub-Signature": good["X-RSHub-Signature"]}, 401, "missing X-RSHub-Timestamp"),
        (signed_headers("wrong", now, path), 403, "does not match"),
        (signed_headers(SECRET, now - 301, path), 401, "expired"),
        (signed_headers(SECRET, now + 400, path), 401, "in the future"),
        ({**good, "X-RSHub-Timestamp": "soon"}, 401, "unix seconds"),
        ({**good, "X-RSHub-Timestamp": "-5"}, 401, "unix seconds"),
        ({**good, "X-RSHub-Signature": "sha1=abc"}, 401, "sha256=<64"),
        ({**good, "X-RSHub-Signature": good["X-RSHub-Signature"].upper()}, 401, "sha256=<64"),
        ({**good, "X-RSHub-Timestamp": str(now - 1)}, 403, "does not match"),
    ]
    for headers, status, words in cases:
        body = await get(hub, path, status, headers)
        assert words in body["error"], (headers, body)
    # None of them was a use: the good signature still works once.
    assert (await get(hub, path, 200, good))["callback"] == callback.url


async def test_a_subscription_without_a_secret_is_for_the_admin_only(
    hub: Hub, callback: CallbackServer
) -> None:
    await subscribe(hub, callback)
    path = path_of("t", callback.url)
    body = await get(hub, path, 403, signed_headers("guess", int(time.time()), path))
    assert "no hub.secret" in body["error"]
    assert (await get(hub, path, 200, ADMIN))["secret"] is False
    assert "Bearer" in (await get(hub, path, 401, {}))["error"]
    await get(hub, "/admin/subscriptions/not-an-id", 400, ADMIN)
    await get(hub, "/admin/subscriptions/0123456789ab", 404, ADMIN)


_PIECES = [
    "",
    " ",
    "sha256=",
    "sha256=" + "0" * 64,
    "sha256=" + "g" * 64,
    "SHA256=" + "a" * 64,
    "9" * 13,
    "1e9",
    "0x10",
    "１２３",
    "\u00e9",
    "\x7f",
    "null",
    "%00",
    "a" * 5000,
]


async def _raw_get(port: int, path: str, headers: list[bytes]) -> int:
    """A GET with header values as given bytes, over a raw socket; the answer's status."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        lines = [f"GET {path} HTTP/1.1".encode(), b"Host: 127.0.0.1", *headers]
        writer.write(b"\r\n".join([*lines, b"Connection: close", b"", b""]))
        status_line = await asyncio.wait_for(reader.readline(), 10)
        await asyncio.wait_for(reader.read(), 10)
        return int(status_line.split()[1])
    finally:
        writer.close()
        await writer.wait_closed()


async def test_a_seeded_fuzz_of_signature_headers(hub: Hub, callback: CallbackServer) -> None:
    await subscribe(hub, callback, **{"hub.secret": SECRET})
    path = path_of("t", callback.url)
    rng = random.Random(20261124)
    port = int(hub.url.rsplit(":", 1)[1])
    async with Watchdog() as dog:
        statuses: dict[int, int] = {}
        used: set[str] = set()
        for _ in range(300):
            offset = rng.randint(-1000, 1000)
            secret = SECRET if rng.random() < 0.7 else rng.choice(["", "x", SECRET + "x"])
            good = signed_headers(secret, int(time.time()) + offset, path)
            if used and rng.random() < 0.1:  # a replay of an accepted one
                good = {**good, "X-RSHub-Signature": rng.choice(sorted(used))}
            values = {}
            for name in ("X-RSHub-Timestamp", "X-RSHub-Signature"):
                roll = rng.random()
                if roll < 0.4:
                    value: str | None = good[name]
                elif roll < 0.6:
                    value = rng.choice(_PIECES)
                elif roll < 0.8:
                    value = good[name][: rng.randrange(len(good[name]) + 1)] + rng.choice(_PIECES)
                else:
                    value = None
                if value is not None:
                    values[name] = value
            raw = [f"{k}: {v}".encode("utf-8", "surrogateescape") for k, v in values.items()]
            if rng.random() < 0.2:
                raw.append(b"X-RSHub-Note: " + bytes(rng.randrange(128, 256) for _ in range(9)))
            status = await _raw_get(port, path, raw)
            statuses[status] = statuses.get(status, 0) + 1
            # Accepted exactly when both headers are a fresh, good signature not used before.
            fresh = values == good and abs(offset) < 299 and secret == SECRET
            signature = good["X-RSHub-Signature"]
            assert (status == 200) == (fresh and signature not in used), (status, raw)
            if fresh:
                used.add(signature)
            # 400: the HTTP parser refused a control character, before the hub saw it.
            assert status in (200, 400, 401, 403), (status, raw)
        # The hub's Redis pool may have grown (concurrent commands): not a leak.
        await dog.sockets_back()
    assert len(used) > 5 and statuses.get(403, 0) > 5, statuses


async def test_the_record_and_presence_on_a_redis_cluster(
    redis_cluster: RedisClusterProcesses,
) -> None:
    for _, port in redis_cluster.nodes:
        node = redis_cluster.client(port)
        node.flushall()
        node.close()
    host, port = redis_cluster.nodes[0]
    settings = Settings(
        host="127.0.0.1", port=free_port(), admin_token="adm", allow_private_callbacks=True
    )
    runner, app = await start_hub(settings, f"redis+cluster://{host}:{port}")
    try:
        async with aiohttp.ClientSession() as session:
            hub = Hub(settings.public_url, app, settings, session)
            others = [await CallbackServer().start(f"/cb{i}") for i in range(3)]
            try:
                topics = [f"topic{i}" for i in range(3)]  # spread over the three masters
                for topic, cb in zip(topics, others, strict=True):
                    await subscribe(hub, cb, topic=topic, **{"hub.secret": SECRET})
                    await hub.publish(topic, notification(changes(1)))
                for topic, cb in zip(topics, others, strict=True):
                    await attempts_logged(hub, topic, cb.url, 1, newest=204)
                    path = path_of(topic, cb.url)
                    signed = signed_headers(SECRET, int(time.time()), path)
                    assert (await get(hub, path, 200, signed))["last_success"] is not None
                    await get(hub, path, 403, signed)  # the replay
                async with session.ws_connect(f"{hub.url}/topics/topic1/ws"):

                    async def counted() -> bool:
                        async with session.get(
                            f"{hub.url}/admin/topics/topic1", headers=ADMIN
                        ) as resp:
                            presence = (await resp.json())["presence"]
                        return bool(presence["ws"] == 1 and presence["websub"]["active"] == 1)

                    await wait_for(counted)
            finally:
                for cb in others:
                    await cb.stop()
    finally:
        await runner.cleanup()


async def test_a_failed_verification_is_kept_in_the_record_and_shown_by_inspect(
    hub: Hub, callback: CallbackServer
) -> None:
    """Why a verification failed was only in the hub's log, which a subscriber cannot read."""
    path = path_of("t", callback.url)
    form = {
        "hub.mode": "subscribe",
        "hub.topic": f"{hub.url}/topics/t",
        "hub.callback": callback.url,
    }
    callback.echo_challenge = False  # a new subscription whose callback does not confirm
    resp = await hub.session.post(hub.url + "/", data=form)
    assert resp.status == 202, await resp.text()

    async def kept() -> bool:
        async with hub.session.get(hub.url + path, headers=ADMIN) as resp:
            return resp.status == 404 and "failed_verification" in await resp.json()

    await wait_for(kept, 10)
    body = await get(hub, path, 404, ADMIN)
    failed = body["failed_verification"]
    assert failed["mode"] == "subscribe" and failed["topic"] == "t" and failed["at"] > 0
    assert "without the hub.challenge" in failed["reason"], failed
    assert "without the hub.challenge" in body["error"] and "was not verified" in body["error"]
    sub_id = subscription_id("t", callback.url)
    args = ("--hub", hub.url, "--id", sub_id, "--admin-token", "adm")
    inspect = Command("inspect", *args)
    assert await (await inspect.start()).wait() == 1
    assert "without the hub.challenge" in inspect.stderr, inspect.stderr

    # Verified at last: the record has no failure; a renewal that fails is kept in it.
    callback.echo_challenge = True
    await subscribe(hub, callback)
    assert (await get(hub, path, 200, ADMIN))["failed_verification"] is None
    callback.echo_challenge = False
    before = len(callback.verifications)
    resp = await hub.session.post(hub.url + "/", data=form)
    assert resp.status == 202

    async def renewal_failed() -> bool:
        record = await get(hub, path, 200, ADMIN)
        return len(callback.verifications) > before and record["failed_verification"] is not None

    await wait_for(renewal_failed, 10)
    inspect = Command("inspect", *args)
    assert await (await inspect.start()).wait() == 0, inspect.stderr
    [line] = [x for x in inspect.lines if x.startswith("  verification  ")]
    assert "subscribe failed" in line and "without the hub.challenge" in line, line
