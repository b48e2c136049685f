"""The lean pipelined connection used for publishes, against the real Redis."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

from hub.script_pipe import ScriptPipe


async def test_concurrent_calls_share_round_trips_and_keep_order(redis_url: str) -> None:
    redis = Redis.from_url(redis_url.rsplit("/", 1)[0] + "/2")
    pipe = ScriptPipe(redis)
    try:
        results = await asyncio.gather(*(pipe.call("INCR", "counter") for _ in range(200)))
        assert results == list(range(1, 201))
        assert int(await redis.get("counter")) == 200  # landed in db 2, as the URL says
        with pytest.raises(NoScriptError):
            await pipe.call("EVALSHA", "0" * 40, 0)
        with pytest.raises(ResponseError, match="unknown command"):
            await pipe.call("NOSUCHCOMMAND")
        assert await pipe.call("PING") == b"PONG"  # errors do not poison the connection
    finally:
        await pipe.close()
        await redis.aclose()


async def test_a_dropped_connection_fails_its_batch_then_reconnects(redis_url: str) -> None:
    redis = Redis.from_url(redis_url)
    pipe = ScriptPipe(redis)
    try:
        await pipe.call("CLIENT", "SETNAME", "victim")
        await redis.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        outcomes = []
        for _ in range(3):
            try:
                outcomes.append(await pipe.call("PING"))
            except RedisConnectionError:
                outcomes.append("dropped")
        assert outcomes == ["dropped", b"PONG", b"PONG"]
    finally:
        await pipe.close()
        await redis.aclose()
