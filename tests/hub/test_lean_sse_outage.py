"""The lean SSE path when a topic's feed cannot start (Redis is down on its first
subscriber): the request goes to aiohttp's path, which answers the error as it always has,
and once Redis is back the next plain subscribe is served lean again."""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from hub.core.settings import Settings
from hub.store.embedded_redis import EmbeddedRedis
from hub.web.lean_sse import LeanStream
from tests.conftest import start_hub
from tests.support import TIME_SCALE, free_port, wait_for


async def _get(port: int, path: str) -> tuple[bytes, bytes, asyncio.StreamWriter]:
    """The response head to a plain SSE subscribe, a sized body (if any), the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    async with asyncio.timeout(20 * TIME_SCALE):
        head = await reader.readuntil(b"\r\n\r\n")
        sized = re.search(rb"(?im)^content-length: *(\d+)", head)
        body = await reader.readexactly(int(sized.group(1))) if sized else b""
    return head, body, writer


@pytest.mark.timeout(90)
async def test_a_feed_that_cannot_start_is_answered_by_aiohttp_then_lean_again(
    tmp_path: Path, caplog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.WARNING)
    redis = EmbeddedRedis(tmp_path / "redis", appendfsync="always")
    redis.start()
    settings = Settings(host="127.0.0.1", port=free_port())
    runner, _app = await start_hub(settings, redis.url)
    served: list[LeanStream] = []
    real_begin = LeanStream.begin

    def begin(self: LeanStream, feed: Any) -> None:
        served.append(self)
        real_begin(self, feed)

    monkeypatch.setattr(LeanStream, "begin", begin)
    writers: list[asyncio.StreamWriter] = []
    try:
        redis.stop()
        head, body, writer = await _get(settings.port, "/topics/fresh/events")
        writers.append(writer)
        assert head.startswith(b"HTTP/1.1 503 "), head
        assert b"storage unavailable" in body, body
        assert not served  # not streamed lean: answered by aiohttp's path
        redis.start()  # same port and data

        async def streamed() -> bool:
            head, _, writer = await _get(settings.port, "/topics/fresh/events")
            writers.append(writer)
            return head.startswith(b"HTTP/1.1 200 ")

        await wait_for(streamed, timeout=30, interval=0.2)
        assert served  # and this one on the lean path
    finally:
        for writer in writers:
            writer.close()
        await runner.cleanup()
        redis.stop()
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
