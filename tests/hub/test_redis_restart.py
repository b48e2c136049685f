"""A Redis that restarted is invisible to clients: no request fails on a dead pooled
connection, no publish is stored twice, and a subscription answered 202 is stored even when
Redis goes away while it is being verified."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from redis.asyncio import Redis

from hub.core.settings import Settings
from hub.store.embedded_redis import EmbeddedRedis
from hub.store.redis_connection import Connections
from tests.conftest import start_hub
from tests.hub.callback_server import CallbackServer
from tests.support import TIME_SCALE, HubProcess, changes, free_port, notification, wait_for

_BURST = 30
_AFTER = "http://example.org/published-after-the-burst"


async def test_pooled_connections_redis_dropped_are_replaced_not_used(redis_url: str) -> None:
    connections = Connections(redis_url)
    other = Redis.from_url(redis_url)
    try:
        # A pool of several connections, all idle again.
        await asyncio.gather(
            *(connections.main.xrevrange("s", "+", "-", count=1) for _ in range(8))
        )
        await other.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        await wait_for(lambda: _closed_by_redis(connections), timeout=5)
        results = await asyncio.gather(
            *(connections.main.xrevrange("s", "+", "-", count=1) for _ in range(8)),
            return_exceptions=True,
        )
        assert results == [[]] * 8
    finally:
        await connections.close()
        await other.aclose()


def _closed_by_redis(connections: Connections) -> bool:
    """Every idle connection of the pool has seen Redis close it (redis-py internals, only
    to know when the connections are dead, as after a restart)."""
    pool = connections.main.connection_pool
    idle = pool._available_connections
    return bool(idle) and all(c._reader is None or c._reader.at_eof() for c in idle)


async def _publish(session: aiohttp.ClientSession, url: str, start: int) -> tuple[int, Any]:
    async with session.post(
        f"{url}/topics/t",
        data=notification(changes(1, start=start)),
        headers={"Content-Type": "application/xml"},
    ) as resp:
        body = await resp.read()
        return resp.status, json.loads(body) if resp.status == 202 else body


async def _subscribe(session: aiohttp.ClientSession, url: str, callback: str) -> int:
    form = {"hub.mode": "subscribe", "hub.topic": f"{url}/topics/t", "hub.callback": callback}
    async with session.post(f"{url}/", data=form) as resp:
        await resp.read()
        return resp.status


async def _burst(
    session: aiohttp.ClientSession, url: str, callbacks: list[CallbackServer], start: int
) -> tuple[list[int], list[tuple[int, Any]]]:
    """``_BURST`` subscribes and ``_BURST`` publishes, all at once."""
    results = await asyncio.gather(
        *(_subscribe(session, url, cb.url) for cb in callbacks),
        *(_publish(session, url, start + i) for i in range(_BURST)),
    )
    subscribed = [status for status in results[:_BURST] if isinstance(status, int)]
    published = [pair for pair in results[_BURST:] if isinstance(pair, tuple)]
    return subscribed, published


async def _stream_until_after(session: aiohttp.ClientSession, url: str) -> list[dict[str, Any]]:
    """The topic's whole stream (``since=0``), through the event published last."""
    events: list[dict[str, Any]] = []
    async with session.ws_connect(f"{url}/topics/t/ws?since=0") as ws:
        async with asyncio.timeout(20 * TIME_SCALE):
            while not events or events[-1]["loc"] != _AFTER:
                msg = await ws.receive()
                assert msg.type == aiohttp.WSMsgType.TEXT, msg
                events += json.loads(msg.data)
    return events


async def _restarted(session: aiohttp.ClientSession, url: str) -> bool:
    async with session.get(f"{url}/healthz") as resp:
        status = (await resp.json()).get("embedded_redis", {})
        return resp.status == 200 and status.get("restarts") == 1


@pytest.mark.timeout(180)
async def test_requests_right_after_a_redis_restart_all_succeed(tmp_path: Path) -> None:
    # No background script call (Change List scan, lease renewal) between the restart and
    # the burst: the burst's publishes are the first to meet the dead connection.
    quiet = {"RSHUB_CHANGELIST_SCAN_SECONDS": "0", "RSHUB_OWNERSHIP_LEASE_SECONDS": "60"}
    hub = HubProcess(str(tmp_path), None, "--allow-private-callbacks", env=quiet).start()
    refusing = [await CallbackServer(echo_challenge=False).start() for _ in range(_BURST)]
    callbacks = [await CallbackServer().start() for _ in range(_BURST)]
    try:
        async with aiohttp.ClientSession() as session:
            # The same burst first, so the hub holds a pool of connections to Redis; its
            # subscribers refuse, so that nothing but the burst uses Redis after the restart.
            subscribed, published = await _burst(session, hub.url, refusing, 0)
            assert subscribed == [202] * _BURST
            assert [status for status, _ in published] == [202] * _BURST
            await wait_for(lambda: all(cb.verifications for cb in refusing), timeout=20)

            pid = int((tmp_path / "redis" / "redis.pid").read_text())
            os.kill(pid, signal.SIGKILL)
            await wait_for(lambda: _restarted(session, hub.url), timeout=30, interval=0.05)

            subscribed, published = await _burst(session, hub.url, callbacks, _BURST)
            failed_subscribes = sum(status >= 500 for status in subscribed)
            failed_publishes = sum(status >= 500 for status, _ in published)
            assert (failed_subscribes, failed_publishes) == (0, 0), (
                f"after the restart {failed_subscribes} of {_BURST} subscribes and "
                f"{failed_publishes} of {_BURST} publishes failed"
            )

            # Every subscription answered 202 gets what is published next.
            status, _ = await _publish_after(session, hub.url)
            assert status == 202
            await wait_for(lambda: all(_AFTER in cb.locs for cb in callbacks), timeout=60)

            # Every accepted publish is stored, once.
            ids = [i for status, body in published if status == 202 for i in body["ids"]]
            assert len(ids) == len(set(ids)) == _BURST
            events = await _stream_until_after(session, hub.url)
            assert set(ids) <= {e["id"] for e in events}
            locs = [e["loc"] for e in events]
            assert len(locs) == len(set(locs)) == 2 * _BURST + 1  # nothing appended twice
    finally:
        hub.stop()
        for cb in refusing + callbacks:
            await cb.stop()
    assert "never retrieved" not in hub.log()


async def _publish_after(session: aiohttp.ClientSession, url: str) -> tuple[int, Any]:
    async with session.post(
        f"{url}/topics/t",
        data=notification([{"loc": _AFTER}]),
        headers={"Content-Type": "application/xml"},
    ) as resp:
        return resp.status, await resp.read()


class _RedisGoesAwayOnVerify(CallbackServer):
    """Answers the verification only after stopping Redis; starts it again a second later.

    The hub then finds Redis away just when it stores the subscription it verified.
    """

    redis: EmbeddedRedis | None = None

    async def _verify(self, request: web.Request) -> web.Response:
        if self.redis is not None and not self.verifications:
            redis, loop = self.redis, asyncio.get_running_loop()
            redis.stop()
            loop.call_later(1.0 * TIME_SCALE, redis.start)  # same port, same data
        return await super()._verify(request)


@pytest.mark.timeout(90)
async def test_a_verified_subscription_is_stored_though_redis_was_away(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    redis = EmbeddedRedis(tmp_path / "redis", appendfsync="always")
    redis.start()
    settings = Settings(host="127.0.0.1", port=free_port(), allow_private_callbacks=True)
    runner, _app = await start_hub(settings, redis.url)
    url = settings.public_url
    callback = _RedisGoesAwayOnVerify()
    callback.redis = redis
    await callback.start()
    try:
        async with aiohttp.ClientSession() as session:
            assert (await _publish(session, url, 0))[0] == 202
            with caplog.at_level(logging.INFO, logger="hub.live.delivery"):
                assert await _subscribe(session, url, callback.url) == 202
                await wait_for(lambda: callback.verifications, timeout=10)
                await wait_for(lambda: "subscribed" in caplog.text, timeout=30)
            assert "retrying" in caplog.text  # it did find Redis away

            async def delivered() -> bool:
                if (await _publish_after(session, url))[0] != 202:
                    return False
                return await _soon(lambda: _AFTER in callback.locs)

            await wait_for(delivered, timeout=30)
            gc.collect()
    finally:
        await callback.stop()
        await runner.cleanup()
        redis.stop()
    assert "never retrieved" not in caplog.text


async def _soon(condition: Any, seconds: float = 2.0) -> bool:
    try:
        await wait_for(condition, timeout=seconds)
    except AssertionError:
        return False
    return True
