"""The lean pipelined connection used for publishes, against the real Redis."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from hub.store.script_pipe import ScriptPipe
from tests.support import TIME_SCALE, wait_for


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


async def test_a_connection_redis_dropped_is_replaced_before_the_next_batch(
    redis_url: str,
) -> None:
    """As after a Redis restart: nothing was written on the dead connection, so the batch
    goes out on a fresh one instead of failing."""
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
        assert outcomes == [b"PONG", b"PONG", b"PONG"]
        assert await pipe.call("CLIENT", "GETNAME") is None  # a new connection
    finally:
        await pipe.close()
        await redis.aclose()


async def test_a_batch_cut_off_after_it_was_written_fails_and_is_not_sent_again(
    redis_url: str,
) -> None:
    """Redis may have run part of a batch before its connection broke (here the INCR):
    sending it again could run it twice (an append would store its changes twice)."""
    redis = Redis.from_url(redis_url)
    pipe = ScriptPipe(redis)
    try:
        incr = pipe.call("INCR", "runs")
        blocked = pipe.call("BLPOP", "nothing-ever", 10)  # same batch, waits in Redis

        async def waiting() -> bool:
            return b"cmd=blpop" in await redis.execute_command("CLIENT", "LIST")

        await wait_for(waiting, timeout=5)
        await redis.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        for call in (incr, blocked):
            with pytest.raises(RedisConnectionError):
                await call
        assert await pipe.call("GET", "runs") == b"1"
    finally:
        await pipe.close()
        await redis.aclose()


async def test_a_batch_redis_does_not_answer_in_time_fails_and_its_connection_is_replaced(
    redis_url: str,
) -> None:
    """The batch's own timer (the protocol link has no reader task to time out): the call
    fails with a timeout, and the next batch goes out on a fresh connection, since a late
    reply on the old one would be taken for the next batch's."""
    redis = Redis.from_url(redis_url)
    pipe = ScriptPipe(redis, timeout=0.3 * TIME_SCALE)
    try:
        await pipe.call("CLIENT", "SETNAME", "slow")
        with pytest.raises(RedisTimeoutError):
            await pipe.call("BLPOP", "nothing-ever", 5 * TIME_SCALE)
        assert await pipe.call("PING") == b"PONG"
        assert await pipe.call("CLIENT", "GETNAME") is None  # not the timed-out connection
    finally:
        await pipe.close()
        await redis.aclose()


async def test_a_batch_on_a_sound_connection_needs_no_task_and_close_waits_for_it(
    redis_url: str,
) -> None:
    """Once connected, a batch is written from a loop callback and answered by the link's
    (measured: a task per batch was a publish's largest store cost); closing the pipe still
    lets the batch in flight finish rather than cut it off."""
    redis = Redis.from_url(redis_url)
    pipe = ScriptPipe(redis)
    try:
        assert await pipe.call("PING") == b"PONG"  # connects (through the task path)
        before = asyncio.all_tasks()
        calls = [pipe.call("INCR", "direct") for _ in range(3)]
        await asyncio.sleep(0)  # the batch goes out
        assert asyncio.all_tasks() == before
        assert await asyncio.gather(*calls) == [1, 2, 3]
        slow = pipe.call("BLPOP", "nothing-ever", 0.2 * TIME_SCALE)
        await asyncio.sleep(0)
        await pipe.close()
        assert slow.done() and slow.result() is None  # answered (timed out in Redis), not cut
    finally:
        await pipe.close()
        await redis.aclose()
