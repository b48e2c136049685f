"""A rolling restart of ``rshub serve --workers 3`` under load costs nothing.

The supervisor runs three workers on one port (``SO_REUSEPORT``) and one Redis (the
session's, so the test can see the live nodes and leases). Changes are published at 200/s
(10 per request, every 50 ms, each request retried with its Idempotency-Key when the worker
that got it goes away) to 20 WebSub subscribers, 5 WebSocket and 5 SSE clients
(:class:`subscriber.stream.HubStream`, which reconnects at once on 1001 or ``event:
shutdown``, to whichever worker the kernel picks). Each worker in turn gets SIGTERM, as an
operator restarting them one by one would send it; the supervisor starts a new one in its
slot, and the next is restarted once the new one has taken up its share of deliveries.

Every subscriber must get every change once, in order: 0 lost, 0 duplicates. The test
prints the longest gap between two deliveries to one subscriber while publishing went on.
A second test checks the part of it that used to wait on ticks: a process that joins gets
its share at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
import redis

from hub.core import placement
from hub.core.settings import Settings
from hub.store import keys
from hub.web.app import RUNTIME
from subscriber.stream import HubStream
from tests.conftest import start_hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_scale_out import (
    TOPIC,
    Callbacks,
    order_key,
    subscribe_all,
)
from tests.support import (
    TIME_SCALE,
    HubProcess,
    changes,
    free_port,
    notification,
    wait_for,
    worker_pids,
)

pytestmark = pytest.mark.timeout(120)

LEASE = 1.5
WORKERS = 3
SUBSCRIBERS = 20
STREAMS = 5  # of each transport
PER_REQUEST = 10
PACE = 0.05  # 10 changes every 50 ms: 200 changes/s
#: The longest a subscriber may wait between two deliveries while changes flow.
GAP_BOUND = 2 * LEASE


class Publisher:
    """Publishes PER_REQUEST changes every PACE seconds, whatever the answers take; a
    request that fails (its worker went away) is retried with its Idempotency-Key."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url
        self.ids: list[str] = []
        self.retries = 0
        self._stop = asyncio.Event()
        self._sent: list[asyncio.Task[None]] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        started = time.monotonic()
        k = 0
        while not self._stop.is_set():
            self._sent.append(asyncio.create_task(self._one(k)))
            k += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._stop.wait(), max(0.0, started + k * PACE - time.monotonic())
                )

    async def _one(self, k: int) -> None:
        body = notification(changes(PER_REQUEST, prefix="http://example.org/roll", start=k * 10))
        headers = {"Content-Type": "application/xml", "Idempotency-Key": f"roll-{k}"}
        for _attempt in range(200):
            try:
                async with self.session.post(
                    f"{self.url}/topics/{TOPIC}", data=body, headers=headers
                ) as resp:
                    if resp.status == 202:
                        self.ids += (await resp.json())["ids"]
                        return
                    assert resp.status == 503, await resp.text()
            except (aiohttp.ClientError, OSError):
                pass
            self.retries += 1
            await asyncio.sleep(PACE)  # the publisher's back-off while its worker goes away
        raise AssertionError(f"request {k} never stored")

    async def stop(self) -> list[str]:
        self._stop.set()
        assert self._task is not None
        await self._task
        await asyncio.gather(*self._sent)
        return sorted(self.ids, key=order_key)


@dataclass
class Follower:
    transport: str
    ids: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


async def follow(session: aiohttp.ClientSession, url: str, since: str, f: Follower) -> None:
    stream = HubStream(
        session,
        url,
        TOPIC,
        transport=f.transport,
        since=since,
        persistent=True,  # type: ignore[arg-type]
    )
    async for batch in stream.batches():
        f.ids.extend(str(e.id) for e in batch)
        f.times.append(time.monotonic())


def longest_gap(times: list[float], start: float, end: float) -> tuple[float, float]:
    """The longest stretch without a delivery between ``start`` and ``end``, and when it
    began."""
    inside = [start, *(t for t in times if start < t < end), end]
    return max((b - a, a) for a, b in itertools.pairwise(inside))


def when(at: float, sigterms: list[float]) -> str:
    """``at`` relative to the last SIGTERM before it."""
    before = [t for t in sigterms if t <= at]
    return f"{at - before[-1]:+.2f}s after SIGTERM {len(before)}" if before else "before any"


@pytest.mark.timeout(120)
async def test_a_rolling_restart_of_three_workers_loses_and_repeats_nothing(
    redis_url: str, tmp_path: Path
) -> None:
    env = {
        "RSHUB_ALLOW_PRIVATE_CALLBACKS": "true",
        "RSHUB_CHANGELIST_SCAN_SECONDS": "0",
        "RSHUB_OWNERSHIP_LEASE_SECONDS": str(LEASE),
    }
    hub = HubProcess(
        str(tmp_path), None, "--workers", str(WORKERS), "--redis-url", redis_url, env=env
    )
    await asyncio.to_thread(hub.start)
    assert hub.proc is not None
    supervisor = hub.proc.pid
    plain = redis.Redis.from_url(redis_url)

    def live_nodes() -> list[str]:
        now_ms = int(time.time() * 1000)
        return [n.decode() for n in plain.zrangebyscore(keys.NODES, now_ms, "+inf")]

    def placed(callbacks: Callbacks) -> Callable[[], bool]:
        """Every subscription is held by the node placement picks among the live ones."""

        def check() -> bool:
            nodes = live_nodes()
            owners = {k.decode(): v.decode() for k, v in plain.hgetall(keys.owners(TOPIC)).items()}
            return len(nodes) == WORKERS and all(
                owners.get(url, "").split(" ")[0] == placement.owner((TOPIC, url), nodes)
                for url in map(callbacks.url, range(SUBSCRIBERS))
            )

        return check

    followers = [Follower(t) for t in ("ws", "sse") for _ in range(STREAMS)]
    try:
        await wait_for(lambda: len(worker_pids(supervisor)) == WORKERS, timeout=20)
        await wait_for(lambda: len(live_nodes()) == WORKERS, timeout=20)
        async with aiohttp.ClientSession() as session, Callbacks(SUBSCRIBERS) as callbacks:
            await subscribe_all(session, [hub], callbacks)
            await wait_for(placed(callbacks), timeout=20)
            received = callbacks.received
            start = {i: len(r.ids) for i, r in enumerate(received)}
            async with session.post(
                f"{hub.url}/topics/{TOPIC}",
                data=notification(changes(1, prefix="http://example.org/mark")),
                headers={"Content-Type": "application/xml"},
            ) as resp:
                mark = (await resp.json())["ids"][0]
            for f in followers:
                f.task = asyncio.create_task(follow(session, hub.url, mark, f))
            publisher = Publisher(session, hub.url)
            began = time.monotonic()
            publisher.start()
            restarts = []
            sigterms: list[float] = []
            for doomed in sorted(worker_pids(supervisor)):
                await wait_for(lambda: len(publisher.ids) >= 200, timeout=10)  # load is on
                left = time.monotonic()
                sigterms.append(left)
                os.kill(doomed, signal.SIGTERM)
                await wait_for(
                    lambda d=doomed: (  # type: ignore[misc]
                        d not in (kids := worker_pids(supervisor)) and len(kids) == WORKERS
                    ),
                    timeout=30,
                )
                await wait_for(placed(callbacks), timeout=30)
                restarts.append(time.monotonic() - left)
            await wait_for(lambda: len(publisher.ids) >= 200, timeout=10)
            ended = time.monotonic()
            published = await publisher.stop()

            def complete() -> bool:
                return all(published[-1] in r.ids for r in received) and all(
                    published[-1] in f.ids for f in followers
                )

            await wait_for(complete, timeout=30)
    finally:
        for f in followers:
            if f.task is not None:
                f.task.cancel()
        await asyncio.gather(*(f.task for f in followers if f.task), return_exceptions=True)
        plain.close()
        await asyncio.to_thread(hub.stop)

    mine = set(published)
    gaps = {"websub": (0.0, 0.0), "ws": (0.0, 0.0), "sse": (0.0, 0.0)}
    lost = duplicates = 0
    for i, r in enumerate(received):
        ids = [e for e in r.ids[start[i] :] if e in mine]
        lost += len(mine - set(ids))
        duplicates += len(ids) - len(set(ids))
        assert ids == published, f"callback {i}: not every change once, in order"
        times = [t for t, _, batch in r.deliveries if mine & set(batch)]
        gaps["websub"] = max(gaps["websub"], longest_gap(times, began, ended))
    for f in followers:
        lost += len(mine - set(f.ids))
        duplicates += len(f.ids) - len(set(f.ids))
        assert f.ids == published, f"{f.transport}: not every change once, in order"
        gaps[f.transport] = max(gaps[f.transport], longest_gap(f.times, began, ended))
    print(
        f"\nrolling restart of {WORKERS} workers (lease {LEASE}s) under {len(published)} "
        f"changes at 200/s: lost {lost}, duplicates {duplicates}, publish retries "
        f"{publisher.retries}; each restart took "
        f"{', '.join(f'{s:.2f}' for s in restarts)}s; longest delivery gap: "
        + ", ".join(f"{k} {v:.2f}s" for k, (v, _) in gaps.items())
        + " (began "
        + ", ".join(f"{k} {when(at, sigterms)}" for k, (_, at) in gaps.items())
        + ")"
    )
    log = (tmp_path / "hub.log").read_text(errors="replace")
    assert log.count("stopped; starting a new one") == WORKERS, "a clean exit is no crash"
    for bad in (" WARNING rshub:", " ERROR ", "Traceback"):
        assert bad not in log, f"{bad.strip()} in the log of a rolling restart"
    worst = max(v for v, _ in gaps.values())
    assert worst <= GAP_BOUND * TIME_SCALE, f"a subscriber waited {worst:.2f}s"


async def test_a_process_that_joins_gets_its_share_at_once_not_on_a_tick(redis_url: str) -> None:
    """A restarted worker (any process that starts) gets its share of the subscriptions as
    soon as their POSTs in flight finish: it says it joined, the others release its share
    and say so, and it claims. Before, each side waited for its next tick: up to two ticks
    (2 s with the default lease) without deliveries for the subscriptions that moved."""
    lease = 9.0  # a 3 s tick: long enough to tell "at once" from "on a tick"
    a_settings = Settings(
        host="127.0.0.1",
        port=free_port(),
        allow_private_callbacks=True,
        changelist_scan_seconds=0,
        ownership_lease_seconds=lease,
    )
    runner_a, app_a = await start_hub(a_settings, redis_url)
    runners = [runner_a]
    callbacks = [await CallbackServer(delay=0.05).start() for _ in range(12)]
    topic = "joining"
    url = a_settings.public_url
    published: list[str] = []
    stop = asyncio.Event()
    try:
        async with aiohttp.ClientSession() as session:
            for cb in callbacks:
                form = {
                    "hub.mode": "subscribe",
                    "hub.topic": f"{url}/topics/{topic}",
                    "hub.callback": cb.url,
                }
                async with session.post(url + "/", data=form) as resp:
                    assert resp.status == 202
            every = {(topic, cb.url) for cb in callbacks}
            await wait_for(lambda: set(app_a[RUNTIME].delivery.workers) == every, timeout=10)

            async def publish_all_along() -> None:
                n = 0
                while not stop.is_set():
                    async with session.post(
                        f"{url}/topics/{topic}",
                        data=notification(changes(3, start=3 * n)),
                        headers={"Content-Type": "application/xml"},
                    ) as resp:
                        assert resp.status == 202
                        published.extend((await resp.json())["ids"])
                    n += 1
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), 0.05)

            publisher = asyncio.create_task(publish_all_along())
            await wait_for(lambda: all(cb.ids for cb in callbacks), timeout=10)
            b_settings = a_settings.model_copy(update={"port": free_port()})
            runner_b, app_b = await start_hub(b_settings, redis_url)
            runners.append(runner_b)
            joined = time.monotonic()
            b = app_b[RUNTIME]

            def holds_its_share() -> bool:
                # Its placement is known once its first round (run in the background while
                # it already serves) has read the subscriptions.
                share = b.ownership._placement()
                return bool(share) and share <= set(b.delivery.workers)

            await wait_for(holds_its_share, timeout=3 * lease)
            took = time.monotonic() - joined
            share = b.ownership._placement()
            stop.set()
            await publisher
            await wait_for(lambda: all(set(published) <= set(cb.ids) for cb in callbacks), 10)
        for cb in callbacks:
            assert cb.ids == published, "every change once, in order, across the move"
        print(f"\na joining process held its share ({len(share)}/12) {took:.2f}s after start")
        assert took < 1.0 * TIME_SCALE, f"its share reached it {took:.2f}s after it started"
    finally:
        stop.set()
        for cb in callbacks:
            await cb.stop()
        for runner in runners:
            await runner.cleanup()
