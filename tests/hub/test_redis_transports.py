"""The hub on each transport to Redis: TCP, a unix socket (``unix://``) and TLS
(``rediss://``, ``tests.redis_transports.TlsFront``), through ``any_redis_url``.

Two hubs on one Redis, as two processes of ``rshub serve`` would be: a publish to either
reaches the live clients of both, the publish going by the script pipe's own connection and
the feeds following by tail notice on every transport; the documents are read through
redis-py on the same URL. Mutual TLS (a client certificate in the URL) and a Redis Cluster
behind TLS (``tests.redis_transports.TlsCluster``) work the same. A Redis that answers but
refuses the hub (a TLS certificate it
cannot trust, a wrong password) stops ``rshub serve`` at once, with one line naming the
problem, instead of being waited for like a Redis not up yet.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from lxml import etree
from redis.crc import key_slot
from redis.exceptions import AuthenticationError, NoPermissionError
from redis.exceptions import ConnectionError as RedisConnectionError

from hub.core.settings import Settings
from hub.store.redis_connection import refused_for_good
from hub.web.app import RUNTIME
from tests.conftest import Hub, start_hub
from tests.hub.test_streams import sse_collect, ws_collect
from tests.redis_cluster import SLOT_RANGES
from tests.redis_transports import TlsCluster, TlsFront, TlsSentinel
from tests.support import changes, free_port, notification, wait_for


@pytest.fixture
async def two_hubs(any_redis_url: str) -> AsyncIterator[tuple[Hub, Hub]]:
    runners = []
    hubs = []
    async with aiohttp.ClientSession() as session:
        try:
            for _ in range(2):
                settings = Settings(host="127.0.0.1", port=free_port())
                runner, app = await start_hub(settings, any_redis_url)
                runners.append(runner)
                hubs.append(Hub(settings.public_url, app, settings, session))
            yield hubs[0], hubs[1]
        finally:
            for runner in runners:
                await runner.cleanup()


def _wrapped(cause: BaseException) -> RedisConnectionError:
    """``cause`` as redis-py raises it: its own error, raised while handling ``cause``."""
    try:
        try:
            raise cause
        except OSError as exc:
            raise RedisConnectionError(f"Error connecting: {exc}") from None
    except RedisConnectionError as wrapped:
        wrapped.__context__ = cause
        return wrapped


def _one_topic_per_master() -> list[str]:
    """A topic whose keys hash to each master's slots (``tests.redis_cluster.SLOT_RANGES``)."""
    found: dict[int, str] = {}
    for i in range(1000):
        slot = key_slot(f"t{i}".encode())
        master = next(n for n, (lo, hi) in enumerate(SLOT_RANGES) if lo <= slot <= hi)
        found.setdefault(master, f"t{i}")
        if len(found) == len(SLOT_RANGES):
            return [found[n] for n in sorted(found)]
    raise AssertionError("no topic for some master")


def _consumers(hub: Hub, topic: str) -> int:
    feed = hub.app[RUNTIME].feeds._feeds.get(topic)
    return feed.consumers if feed else 0


async def test_publishes_to_either_hub_reach_the_live_clients_of_both(
    two_hubs: tuple[Hub, Hub],
) -> None:
    a, b = two_hubs
    async with (
        a.session.ws_connect(f"{a.url}/topics/t/ws") as ws,
        b.session.get(f"{b.url}/topics/t/events") as sse,
    ):
        assert sse.status == 200
        await wait_for(lambda: _consumers(a, "t") == 1 and _consumers(b, "t") == 1, 10)
        for hub in (a, b):  # the lean paths, not redis-py's: on every transport
            runtime = hub.app[RUNTIME]
            assert runtime.store.scripts._raw
            assert runtime.feeds._feeds["t"].by_notice
        first = await a.publish("t", notification(changes(3)))
        second = await b.publish("t", notification(changes(2, start=3)))
        assert first.status == second.status == 202
        ids = (await first.json())["ids"] + (await second.json())["ids"]
        assert [e["id"] for e in await ws_collect(ws, 5)] == ids
        assert [e["id"] for e in await sse_collect(sse, 5)] == ids

    async with b.session.get(f"{b.url}/topics/t/changelist.xml") as resp:
        assert resp.status == 200
        body = await resp.read()
    root = etree.fromstring(body)
    sitemap = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
    pages = [loc.text for loc in root.iter(f"{sitemap}loc")]
    locs: list[str] = []
    for page in pages:
        async with b.session.get(page) as resp:
            locs += [e.text for e in etree.fromstring(await resp.read()).iter(f"{sitemap}loc")]
    assert sorted(loc for loc in locs if "/r" in loc) == sorted(
        f"http://example.org/r{i}" for i in range(5)
    )


@pytest.mark.parametrize("refusal", ["untrusted TLS certificate", "wrong password"])
async def test_a_redis_that_refuses_the_hub_stops_start_up_at_once_with_one_line(
    refusal: str, request: pytest.FixtureRequest
) -> None:
    if refusal == "untrusted TLS certificate":  # no ssl_ca_certs: the test CA is not trusted
        url, expected = str(request.getfixturevalue("tls_redis")).split("?", 1)[0], "CERTIFICATE"
    else:
        good = str(request.getfixturevalue("redis_url"))
        url = re.sub(r"//[^@]*@", "//:not-the-password@", good)
        expected = "invalid username-password pair"
        assert url != good
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rshub",
        "serve",
        "--port",
        str(free_port()),
        "--redis-url",
        url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode == 2, (out, err)
    message = err.decode()
    assert "bad setting: redis_url" in message and expected in message, message
    assert "retrying" not in message and "Traceback" not in message, message
    assert "not-the-password" not in message  # the URL's secret stays redacted


async def _serves_a_publish(redis_url: str, **settings: Any) -> None:
    """A hub on ``redis_url`` takes a publish to an SSE subscriber, by its own lean paths
    (the script pipe's link, the feed following by tail notice)."""
    hub_settings = Settings(host="127.0.0.1", port=free_port(), redis_url=redis_url, **settings)
    runner, app = await start_hub(hub_settings, redis_url)
    try:
        async with aiohttp.ClientSession() as session:
            hub = Hub(hub_settings.public_url, app, hub_settings, session)
            async with session.get(f"{hub.url}/topics/s/events") as sse:
                await wait_for(lambda: _consumers(hub, "s") == 1, 10)
                assert app[RUNTIME].feeds._feeds["s"].by_notice
                resp = await hub.publish("s", notification(changes(2)))
                assert resp.status == 202, await resp.text()
                ids = (await resp.json())["ids"]
                assert [e["id"] for e in await sse_collect(sse, 2)] == ids
        assert app[RUNTIME].store.scripts._raw
    finally:
        await runner.cleanup()


async def test_a_redis_asking_for_a_client_certificate_gets_the_urls_one(
    mtls_redis: TlsFront,
) -> None:
    await _serves_a_publish(mtls_redis.url + mtls_redis.client_options)


async def test_a_cluster_reached_over_tls_takes_publishes_on_every_master(
    tls_cluster: TlsCluster,
) -> None:
    """Each master behind TLS: the script pipe's links to the masters speak TLS too (before,
    they spoke plain TCP to the TLS ports and every publish failed)."""
    tls_cluster.flush()
    settings = Settings(host="127.0.0.1", port=free_port(), redis_cluster=True)
    runner, app = await start_hub(settings, tls_cluster.url)
    try:
        async with aiohttp.ClientSession() as session:
            hub = Hub(settings.public_url, app, settings, session)
            topics = _one_topic_per_master()
            streams = [await session.get(f"{hub.url}/topics/{t}/events") for t in topics]
            try:
                await wait_for(lambda: all(_consumers(hub, t) == 1 for t in topics), 10)
                published = {}
                for topic in topics:
                    resp = await hub.publish(topic, notification(changes(2)))
                    assert resp.status == 202, await resp.text()
                    published[topic] = (await resp.json())["ids"]
                for topic, sse in zip(topics, streams, strict=True):
                    assert [e["id"] for e in await sse_collect(sse, 2)] == published[topic]
            finally:
                for sse in streams:
                    sse.close()
            scripts = app[RUNTIME].store.scripts
            assert scripts._raw and len(scripts._node_links) == 3  # its own TLS link to each
    finally:
        await runner.cleanup()


async def test_a_redis_behind_sentinel_over_tls_takes_waited_publishes(tmp_path: Path) -> None:
    """``rediss+sentinel://``: the Sentinels name the master (its TLS front), the hub's
    own links reach it over TLS, and a publish with ``RSHUB_REDIS_WAIT_REPLICAS=1`` is
    acknowledged by the replica."""
    with TlsSentinel(tmp_path / "redis", replicas=1) as tls:
        await _serves_a_publish(tls.url, redis_wait_replicas=1)


async def test_connections_redis_closes_are_replaced_and_no_change_is_lost(
    two_hubs: tuple[Hub, Hub], any_redis_url: str
) -> None:
    """As after a Redis restart: every connection of both hubs closed by Redis, the pipe's,
    the notices' and redis-py's pools alike; the next publishes go through and the live
    clients miss nothing."""
    a, b = two_hubs
    admin = aioredis.Redis.from_url(any_redis_url)
    try:
        async with (
            a.session.ws_connect(f"{a.url}/topics/t/ws") as ws,
            b.session.get(f"{b.url}/topics/t/events") as sse,
        ):
            await wait_for(lambda: _consumers(a, "t") == 1 and _consumers(b, "t") == 1, 10)
            ids = []
            for round_ in range(3):
                for hub in (a, b):
                    resp = await hub.publish("t", notification(changes(1, start=len(ids))))
                    assert resp.status == 202, await resp.text()
                    ids += (await resp.json())["ids"]
                links = [hub.app[RUNTIME].store.scripts._link for hub in (a, b)]

                async def reconnected() -> bool:
                    # The notices' links of the round before come back in their own time
                    # (through the TLS front a moment later): kill them once they are back.
                    clients = await admin.execute_command("CLIENT", "LIST", "TYPE", "pubsub")
                    return len(clients.splitlines()) >= 2

                await wait_for(reconnected, 10)
                killed = 0
                for kind in ("normal", "pubsub"):
                    killed += await admin.execute_command(
                        "CLIENT", "KILL", "TYPE", kind, "SKIPME", "yes"
                    )
                assert killed >= 4, (round_, killed)  # each hub's pipe and notices at least
                # Until the close reaches the hub (at once on TCP; through the TLS front a
                # moment later), a publish may be written on the dying connection: a 503
                # its client retries. The hub's promise starts once it can see the close.
                await wait_for(lambda ls=links: all(k is None or not k.alive() for k in ls), 10)  # type: ignore[misc]
            for hub in (a, b):
                resp = await hub.publish("t", notification(changes(1, start=len(ids))))
                assert resp.status == 202, await resp.text()
                ids += (await resp.json())["ids"]
            assert [e["id"] for e in await ws_collect(ws, len(ids))] == ids
            assert [e["id"] for e in await sse_collect(sse, len(ids))] == ids
    finally:
        await admin.aclose()


@pytest.mark.parametrize(
    ("error", "for_good"),
    [
        (AuthenticationError("invalid username-password pair"), True),
        (NoPermissionError("no permissions to run the 'ping' command"), True),
        (_wrapped(ssl.SSLCertVerificationError(1, "certificate verify failed")), True),
        (RedisConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused."), False),
        (_wrapped(ConnectionRefusedError(111, "Connection refused")), False),
        (_wrapped(ssl.SSLEOFError(8, "EOF occurred in violation of protocol")), False),
        (_wrapped(ssl.SSLError(1, "[SSL: DECRYPTION_FAILED_OR_BAD_RECORD_MAC]")), False),
        (TimeoutError(), False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_what_refuses_the_hub_for_good(error: BaseException, for_good: bool) -> None:
    assert refused_for_good(error) is for_good


def test_a_cycle_of_causes_ends_the_walk() -> None:
    first, second = RedisConnectionError("a"), RedisConnectionError("b")
    first.__context__, second.__context__ = second, first
    assert refused_for_good(first) is False
