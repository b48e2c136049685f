"""With ``RSHUB_REDIS_WAIT_REPLICAS=1`` only publishes wait through a Redis failover:
WebSub deliveries, leases and heartbeats go on, on every topic.

A master with one replica is SIGKILLed (Sentinel; and a Cluster of three masters with one
replica each, a topic on each), so the promoted replica has none left: every publish to it
waits out its ``WAIT`` and answers 503, stored all the same, until a replica is back (none
comes back here). Two hubs, both with ``WAIT 1``, publish to every topic all the while and
deliver every topic to a callback. Publishes wait, so a change is stored only when its
batch goes out (one per ``WAIT`` and hub); but once a publish was answered as stored, its
change must reach the subscriber within moments, not on the replica's return, and no lease
may be taken over from a hub whose heartbeats were held up behind a publish's ``WAIT``
(on a connection shared with the publishes, neither held).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from redis.crc import key_slot

from hub.core.settings import Settings
from hub.store import keys
from tests.conftest import start_hub
from tests.hub.callback_server import CallbackServer
from tests.redis_cluster import RedisClusterProcesses
from tests.redis_sentinel import RedisSentinelProcesses
from tests.support import TIME_SCALE, free_port, notification, wait_for

#: Long enough that the failover itself (1-3 s here) expires no hub's heartbeat: a lease
#: taken over is then one this hub's own held-up heartbeat let go.
LEASE_SECONDS = 10.0
#: Each publish's ``WAIT``: anything held up behind one (a heartbeat, a cursor write) takes
#: at least this long.
WAIT_SECONDS = 5.0
#: A change answered as stored after the promotion must be delivered within this: not
#: scaled by the load, since it must stay below :data:`WAIT_SECONDS`; what comes back from
#: a failover retries with back-off (0.1 s doubling), measured 0.0-1.5 s.
RESUME_SECONDS = 4.0
#: Seconds between two changes of one publisher.
PACE = 0.2


async def _post(
    session: aiohttp.ClientSession,
    url: str,
    topic: str,
    loc: str,
    stored: dict[str, float],
    refused: list[tuple[int, str]],
) -> None:
    """One publish of ``loc``; ``stored``: its loc -> when the answer said it was stored
    (a 202, or the 503 of a ``WAIT`` no replica acknowledged); ``refused``: every other
    answer's status (0: none came) and text."""
    try:
        async with session.post(
            f"{url}/topics/{topic}",
            data=notification([{"loc": loc}]),
            headers={"Content-Type": "application/xml", "Idempotency-Key": loc},
            timeout=aiohttp.ClientTimeout(total=60 * TIME_SCALE),
        ) as resp:
            answer = await resp.text()
    except (aiohttp.ClientError, TimeoutError) as exc:
        refused.append((0, repr(exc)))
        return
    if resp.status == 202 or "the changes are stored" in answer:
        stored[loc] = time.monotonic()
    if resp.status != 202:
        refused.append((resp.status, answer))


async def _publish(
    session: aiohttp.ClientSession,
    url: str,
    topic: str,
    publisher: int,
    stored: dict[str, float],
    refused: list[tuple[int, str]],
    stop: asyncio.Event,
) -> None:
    """Publish a new change to ``topic`` every :data:`PACE` seconds, not waiting for the
    answers (each takes a ``WAIT`` once the primary has no replica), so that changes are
    sent all through the failover. A change answered 503 is not sent again: with no replica
    to come back, its retry would be refused as long as the test runs."""
    posts: set[asyncio.Task[None]] = set()
    n = 0
    try:
        while not stop.is_set():
            loc = f"http://example.org/{topic}/{publisher}/{n}"
            post = asyncio.create_task(_post(session, url, topic, loc, stored, refused))
            posts.add(post)
            post.add_done_callback(posts.discard)
            n += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), PACE)  # the publisher's pace
    finally:  # what is still waiting for its answer is measured no more
        for post in list(posts):
            post.cancel()
        await asyncio.gather(*posts, return_exceptions=True)  # cancelled, or done


async def _deliveries_through_failover(
    redis_url: str,
    topics: list[str],
    kill: Callable[[], int],
    await_failover: Callable[[int], float],
    caplog: pytest.LogCaptureFixture,
) -> dict[str, float]:
    """Per topic, the seconds from the first answer after the promotion that said a change
    was stored until such a change was delivered; at most :data:`RESUME_SECONDS`."""
    caplog.set_level(logging.INFO, logger="hub.live.ownership")
    callback = await CallbackServer().start()
    runners: list[web.AppRunner] = []
    urls: list[str] = []
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    stored: dict[str, dict[str, float]] = {topic: {} for topic in topics}
    refused: list[tuple[int, str]] = []
    try:
        for _ in range(2):
            settings = Settings(
                host="127.0.0.1",
                port=free_port(),
                redis_url=redis_url,
                redis_wait_replicas=1,
                redis_wait_seconds=WAIT_SECONDS,
                allow_private_callbacks=True,
                ownership_lease_seconds=LEASE_SECONDS,
            )
            runner, _app = await start_hub(settings, redis_url)
            runners.append(runner)
            urls.append(settings.public_url)
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            for topic in topics:
                form = {
                    "hub.mode": "subscribe",
                    "hub.topic": f"{urls[0]}/topics/{topic}",
                    "hub.callback": f"{callback.url}?topic={topic}",
                }
                async with session.post(f"{urls[0]}/", data=form) as resp:
                    assert resp.status == 202, await resp.text()
            await wait_for(lambda: len(callback.verifications) == len(topics), timeout=10)
            for topic in topics:  # each topic from both hubs
                for i, url in enumerate(urls):
                    publish = _publish(session, url, topic, i, stored[topic], refused, stop)
                    tasks.append(asyncio.create_task(publish))

            def first_stored(topic: str, since: float) -> float | None:
                """When the first change answered as stored after ``since`` was answered,
                if one of those was delivered."""
                after = {loc: at for loc, at in stored[topic].items() if at >= since}
                if not after or after.keys().isdisjoint(callback.locs):
                    return None
                return min(after.values())

            await wait_for(lambda: all(first_stored(t, 0.0) for t in topics), timeout=10)

            old = kill()
            failover = await asyncio.to_thread(await_failover, old)
            promoted_at = time.monotonic()
            resumed: dict[str, float] = {}

            def every_topic_resumed() -> bool:
                for topic in topics:
                    answered = first_stored(topic, promoted_at)
                    if topic not in resumed and answered is not None:
                        resumed[topic] = time.monotonic() - answered
                return len(resumed) == len(topics)

            # Publishes wait out their WAIT (answered then): deliveries must not.
            with contextlib.suppress(AssertionError):  # reported below, with the figures
                await wait_for(every_topic_resumed, timeout=WAIT_SECONDS + 2 * RESUME_SECONDS)
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks), timeout=10 * TIME_SCALE)
        for runner in runners:
            await runner.cleanup()
        runners.clear()
        print(f"\nfailover: promoted after {failover:.2f}s; publishes refused {len(refused)}")
        for topic in topics:
            lag = resumed.get(topic, float("inf"))
            print(f"  {topic}: delivered {lag:.2f}s after the first answer saying stored")
        # Refused only as a store that is away or short of replicas refuses: 503.
        assert {status for status, _ in refused} <= {503}, refused[:3]
        lags = {t: resumed.get(t, float("inf")) for t in topics}
        assert max(lags.values()) < RESUME_SECONDS, lags
        return lags
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for runner in runners:
            await runner.cleanup()
        await callback.stop()


def _taken_over(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "taken over" in r.getMessage()]


@pytest.mark.timeout(60)
async def test_deliveries_go_on_through_a_sentinel_failover_with_wait(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with RedisSentinelProcesses(tmp_path / "redis", replicas=1) as redis:
        await _deliveries_through_failover(
            redis.url, ["a", "b", "c"], redis.kill_master, redis.await_failover, caplog
        )
    assert not _taken_over(caplog)


@pytest.mark.timeout(60)
async def test_deliveries_go_on_on_every_master_through_a_cluster_failover_with_wait(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with RedisClusterProcesses(tmp_path / "redis", replicas=1, node_timeout_ms=1000) as cluster:
        masters = [port for _, port in cluster.nodes]
        topics: list[str] = []
        for master in masters:  # one topic on each master, the victim's first
            topics.append(
                next(
                    name
                    for name in (f"t{i}" for i in range(1000))
                    if cluster.owner(key_slot(keys.events(name).encode())) == master
                )
            )
        victim = masters[0]
        slot = key_slot(keys.events(topics[0]).encode())

        def kill() -> int:
            cluster.kill(victim)
            return victim

        await _deliveries_through_failover(
            f"redis+cluster://127.0.0.1:{masters[1]}",
            topics,
            kill,
            lambda old: cluster.await_failover(old, slot),
            caplog,
        )
    assert not _taken_over(caplog)
