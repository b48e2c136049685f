"""The lean publish path when Redis is out after a publish was decided: the append has
begun, so the request cannot be handed to aiohttp (it might be stored twice); the lean
path answers the same 503 aiohttp's path answers (hub.web.error_responses), marks Redis
unhealthy the same way, logs no traceback, and keeps the connection for the next request."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis

from hub.core.settings import Settings
from hub.store import keys
from hub.store.embedded_redis import EmbeddedRedis
from hub.web.admin import OBSERVING
from tests.conftest import Hub, start_hub
from tests.hub.test_lean_publish import (
    Conn,
    lean_served,
    lean_spy,
    normal,
    request,
    via_aiohttp,
)
from tests.support import TIME_SCALE, changes, free_port, notification, wait_for

__all__ = ["lean_served", "lean_spy"]  # the fixtures


def _error(body: bytes) -> str:
    message: str = orjson.loads(body)["error"]
    return re.sub(r"\(.*\)", "(-)", message)


@pytest.mark.timeout(90)
async def test_a_store_outage_is_answered_503_as_aiohttp_answers_it(
    tmp_path: Path, caplog: Any, lean_served: list[str]
) -> None:
    caplog.set_level(logging.WARNING)
    redis = EmbeddedRedis(tmp_path / "redis", appendfsync="always")
    redis.start()
    settings = Settings(host="127.0.0.1", port=free_port())
    runner, app = await start_hub(settings, redis.url)
    hub = Hub(settings.public_url, app, settings, None)  # type: ignore[arg-type]
    conn = await Conn.open(hub)
    other = await Conn.open(hub)
    try:
        data = request(notification(changes(1)), token=None)
        head, _ = await conn.ask(data)
        assert head.startswith(b"HTTP/1.1 202 ") and lean_served == ["t"]
        redis.stop()
        lean_head, lean_body = await conn.ask(data)
        assert lean_served == ["t", "t"]  # decided lean, then the store failed
        head, body = await other.ask(via_aiohttp(data))
        assert lean_served == ["t", "t"]
        assert lean_head.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), lean_head
        assert normal(lean_head) == normal(head), (lean_head, head)
        assert _error(lean_body) == _error(body), (lean_body, body)
        assert "may or may not have been stored" in _error(lean_body)
        assert app[OBSERVING].health.error is not None
        # The connection is still the lean path's: the next request is parsed again.
        head, _ = await conn.ask(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503 "), head
    finally:
        conn.close()
        other.close()
        await runner.cleanup()
        redis.stop()
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    warnings = [r.getMessage() for r in caplog.records if "storage error on POST" in r.getMessage()]
    assert len(warnings) == 2, warnings


@pytest.mark.timeout(90)
async def test_shutdown_answers_a_lean_publish_whose_append_is_under_way(
    tmp_path: Path, lean_served: list[str]
) -> None:
    """SIGTERM's shutdown waits for a lean publish being stored: it gets its 202 and the
    change is in the stream, not a closed connection and a publish the client must guess
    about. Redis holds the append back (``CLIENT PAUSE … WRITE``) while the hub stops. (The
    pause holds the hand-over's writes too, so this guards the outcome; the listener's
    explicit wait, ``Lean.finished``, is what keeps it when the hand-over has nothing to
    write.)"""
    redis = EmbeddedRedis(tmp_path / "redis")
    redis.start()
    settings = Settings(host="127.0.0.1", port=free_port(), keepalive_timeout_seconds=600)
    runner, app = await start_hub(settings, redis.url)
    hub = Hub(settings.public_url, app, settings, None)  # type: ignore[arg-type]
    conn = await Conn.open(hub)
    client = aioredis.Redis.from_url(redis.url)
    stopping: asyncio.Task[None] | None = None
    try:
        data = request(notification(changes(1)), token=None)
        head, _ = await conn.ask(data)
        assert head.startswith(b"HTTP/1.1 202 ") and lean_served == ["t"]
        await client.execute_command("CLIENT", "PAUSE", int(2000 * TIME_SCALE), "WRITE")
        conn.writer.write(data)
        await wait_for(lambda: len(lean_served) == 2)
        stopping = asyncio.ensure_future(runner.cleanup())
        head, body = await conn.answer()
        assert head.startswith(b"HTTP/1.1 202 "), (head, body)
        (stored,) = orjson.loads(body)["ids"]
        assert await conn.closed()  # answered, then closed: the hub is stopping
        async with asyncio.timeout(30 * TIME_SCALE):
            await stopping
        ids = [i.decode() for i, _ in await client.xrange(keys.events("t"))]
        assert stored in ids and len(ids) == 2, (stored, ids)
    finally:
        conn.close()
        if stopping is None:
            await runner.cleanup()
        await client.aclose()
        redis.stop()
