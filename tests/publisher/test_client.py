"""The asyncio publisher against a real hub: batching, retries, idempotency, bounded queue."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from hub.core.settings import Settings
from publisher import BatchPolicy, BlockingPublisher, Publisher, RetryPolicy
from publisher.changes import make_change
from publisher.exceptions import (
    HubUnavailable,
    PublishRejected,
    QueueFullError,
    UnsentChangesError,
    UsageError,
)
from tests.conftest import Hub
from tests.support import free_port, wait_for

from .helpers import T0, LosingProxy, entries, hub_on, stored_events

FAST = RetryPolicy(base=0.01, max_delay=0.05)


async def test_publish_returns_the_ids_the_hub_assigned(hub: Hub, redis_url: str) -> None:
    async with Publisher(hub.url, "t", retry=FAST) as pub:
        ids = await pub.publish(entries(3))
    stored = await stored_events(redis_url, "t")
    assert ids == [e["id"] for e in stored]
    assert [e["loc"] for e in stored] == [f"http://example.org/r{i}" for i in range(3)]
    assert stored[0]["lastmod"] == "2026-01-01T00:00:00Z"


async def test_batches_by_count(hub: Hub, redis_url: str) -> None:
    pub = Publisher(hub.url, "t", batching=BatchPolicy(max_changes=10, max_wait=60), retry=FAST)
    await pub.start()
    futures = [pub.submit(e) for e in entries(25)]
    await asyncio.gather(*futures[:20])
    assert pub.stats["notifications"] == 2
    assert not futures[20].done()  # the last 5 wait for companions (max_wait = 60 s)
    await pub.close()  # flushes them
    assert pub.stats["notifications"] == 3
    ids = [(await f)[0] for f in futures]
    assert ids == [e["id"] for e in await stored_events(redis_url, "t")]


async def test_batches_by_time(hub: Hub) -> None:
    async with Publisher(
        hub.url, "t", batching=BatchPolicy(max_changes=1000, max_wait=0.05), retry=FAST
    ) as pub:
        futures = [pub.submit(e) for e in entries(7)]
        await asyncio.gather(*futures)  # sent by the timer, not by count or close
        assert pub.stats["notifications"] == 1


async def test_batching_off_sends_each_change_alone(hub: Hub) -> None:
    async with Publisher(hub.url, "t", batching=BatchPolicy.off(), retry=FAST) as pub:
        await asyncio.gather(*(pub.submit(e) for e in entries(5)))
        assert pub.stats["notifications"] == 5


async def test_out_of_order_change_starts_a_new_notification(hub: Hub, redis_url: str) -> None:
    late, early = entries(2)[1], entries(1)[0]
    async with Publisher(
        hub.url, "t", batching=BatchPolicy(max_changes=100, max_wait=60), retry=FAST
    ) as pub:
        first, second = pub.submit(late), pub.submit(early)
        await pub.flush()
        assert pub.stats["notifications"] == 2
    assert [e["loc"] for e in await stored_events(redis_url, "t")] == [late.loc, early.loc]
    assert (await first) and (await second)


async def test_flush_sends_without_waiting(hub: Hub) -> None:
    async with Publisher(
        hub.url, "t", batching=BatchPolicy(max_changes=100, max_wait=60), retry=FAST
    ) as pub:
        future = pub.submit(entries(2))
        await pub.flush()
        assert future.done() and len(future.result()) == 2


async def test_retry_after_lost_answer_is_not_stored_twice(hub: Hub, redis_url: str) -> None:
    proxy = LosingProxy(hub.url, lose=1)
    runner = web.AppRunner(proxy.app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with Publisher(f"http://127.0.0.1:{port}", "t", retry=FAST) as pub:
            ids = await pub.publish(entries(4))
        assert pub.stats["retries"] == 1
    finally:
        await runner.cleanup()
    keys = [r["Idempotency-Key"] for r in proxy.requests]
    assert len(keys) == 2 and keys[0] == keys[1]
    stored = await stored_events(redis_url, "t")
    assert [e["id"] for e in stored] == ids  # 4 events, not 8


async def test_hub_briefly_down_no_loss_no_duplicate(redis_url: str) -> None:
    settings = Settings(host="127.0.0.1", port=free_port())
    pub = Publisher(
        settings.public_url, "t", retry=FAST, batching=BatchPolicy(max_changes=50, max_wait=0.01)
    )
    await pub.start()
    async with hub_on(settings, redis_url):
        before = await pub.publish(entries(10))
    # the hub is down now: changes queue up and are retried
    futures = [pub.submit(e) for e in entries(100, start=10)]
    await wait_for(lambda: pub.down_since is not None and pub.stats["retries"] >= 2)
    assert pub.queued == 100
    async with hub_on(settings, redis_url):
        after = [(await f)[0] for f in futures]
        await pub.close()
    assert pub.down_since is None
    stored = await stored_events(redis_url, "t")
    assert [e["id"] for e in stored] == before + after
    assert [e["loc"] for e in stored] == [f"http://example.org/r{i}" for i in range(110)]


async def test_queue_full_is_an_error_never_a_silent_drop(caplog: Any) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    pub = Publisher(dead, "t", retry=FAST, max_queued=5)
    await pub.start()
    futures = [pub.submit(e) for e in entries(5)]
    await wait_for(lambda: pub.down_since is not None)
    with pytest.raises(QueueFullError, match=r"queue full: 5 of 5 .* failing") as info:
        pub.submit(entries(1, start=99))
    assert info.value.queued == 5
    with pytest.raises(UnsentChangesError, match="5 changes unsent") as closed:
        await pub.close(timeout=0.1)
    assert closed.value.count == 5
    for future in futures:
        with pytest.raises(UnsentChangesError):
            await future
    assert "retrying" in caplog.text


async def test_give_up_after_budget_raises_hub_unavailable() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    async with Publisher(
        dead, "t", retry=RetryPolicy(base=0.01, max_delay=0.02, give_up_after=0.1)
    ) as pub:
        with pytest.raises(HubUnavailable, match="gave up after"):
            await pub.publish(entries(1))
        assert pub.stats["failed"] == 1


@pytest.mark.parametrize("hub_settings", [{"tokens": ["s3cret"]}])
async def test_tokens(hub: Hub, redis_url: str) -> None:
    async with Publisher(hub.url, "t", token="wrong", retry=FAST) as pub:
        with pytest.raises(PublishRejected, match="HTTP 403") as info:
            await pub.publish(entries(1))
        assert info.value.status == 403
    async with Publisher(hub.url, "t", retry=FAST) as pub:
        with pytest.raises(PublishRejected, match="HTTP 401"):
            await pub.publish(entries(1))
    async with Publisher(hub.url, "t", token="s3cret", retry=FAST) as pub:
        assert len(await pub.publish(entries(2))) == 2
    assert len(await stored_events(redis_url, "t")) == 2


async def test_invalid_change_is_refused_at_submit(hub: Hub) -> None:
    with pytest.raises(UsageError, match="not a valid change"):
        make_change("http://example.org/x", "moved", T0)
    async with Publisher(hub.url, "t") as pub:
        with pytest.raises(UsageError, match=r"closed|start"):
            Publisher(hub.url, "t").submit(entries(1))
        assert await pub.publish([]) == []


async def test_blocking_facade(hub: Hub, redis_url: str) -> None:
    def script() -> list[str]:
        with BlockingPublisher(hub.url, "t", retry=FAST) as pub:
            ids = pub.publish(entries(3))
            future = pub.submit(entries(2, start=3))
            pub.flush()
            return ids + future.result(timeout=10)

    ids = await asyncio.to_thread(script)
    assert ids == [e["id"] for e in await stored_events(redis_url, "t")]
