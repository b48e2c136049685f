"""Several real hub processes on one Redis, or on a real three-master Redis Cluster.

Each test starts ``rshub serve`` processes itself (tests.support.HubProcess) against the
session's redis-server or the session's cluster (tests.redis_cluster), subscribes real
WebSub callbacks served here on 127.0.0.1, and follows with WebSocket and SSE clients
connected to different processes. A delivery names the process that sent it
(``X-RSHub-Node``), so the tests can tell who delivered what.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis
import redis.asyncio
from aiohttp import web

from hub.core import placement
from hub.store import keys
from hub.store.embedded_redis import EmbeddedRedis
from hub.store.redis_connection import connect
from subscriber.stream import HubStream
from tests.redis_cluster import RedisClusterProcesses
from tests.support import (
    TIME_SCALE,
    HubProcess,
    changes,
    free_port,
    notification,
    wait_for,
    worker_pids,
)

pytestmark = pytest.mark.timeout(180)

TOPIC = "scale"
#: The default lease: a dead process's subscriptions must move within this bound.
TAKEOVER_BOUND = 5.0
_ID = re.compile(rb'rshub:id="([^"]+)"')


@dataclass
class Received:
    ids: list[str] = field(default_factory=list)
    #: (monotonic time, sending node, ids) per delivery.
    deliveries: list[tuple[float, str, list[str]]] = field(default_factory=list)


class Callbacks:
    """``n`` WebSub subscriber endpoints (``/cb/{i}``) on one loopback server."""

    def __init__(self, n: int) -> None:
        self.received = [Received() for _ in range(n)]
        self.port = free_port()
        self._runner: web.AppRunner | None = None

    def url(self, i: int) -> str:
        return f"http://127.0.0.1:{self.port}/cb/{i}"

    async def _verify(self, request: web.Request) -> web.Response:
        return web.Response(text=request.query.get("hub.challenge", ""))

    async def _deliver(self, request: web.Request) -> web.Response:
        body = await request.read()
        ids = [m.decode() for m in _ID.findall(body)]
        got = self.received[int(request.match_info["i"])]
        got.ids.extend(ids)
        got.deliveries.append((time.monotonic(), request.headers["X-RSHub-Node"], ids))
        return web.Response(status=204)

    async def __aenter__(self) -> Callbacks:
        app = web.Application()
        app.router.add_get("/cb/{i}", self._verify)
        app.router.add_post("/cb/{i}", self._deliver)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


@dataclass
class Backend:
    name: str
    url: str

    def client(self) -> redis.asyncio.Redis | redis.asyncio.RedisCluster:
        return connect(self.url)


@pytest.fixture(params=["redis", "cluster"])
def backend(request: pytest.FixtureRequest, redis_server: EmbeddedRedis) -> Iterator[Backend]:
    if request.param == "redis":
        plain = redis.Redis.from_url(redis_server.url)
        plain.flushall()
        plain.close()
        yield Backend("redis", redis_server.url)
        return
    cluster: RedisClusterProcesses = request.getfixturevalue("redis_cluster")
    for _, port in cluster.nodes:
        node = cluster.client(port)
        node.flushall()
        node.close()
    host, port = cluster.nodes[0]
    yield Backend("cluster", f"redis+cluster://{host}:{port}")


def start_hubs(tmp_path: Path, backend: Backend, n: int = 3) -> list[HubProcess]:
    hubs = []
    for i in range(n):
        data = tmp_path / f"hub{i}"
        data.mkdir()
        env = {"RSHUB_ALLOW_PRIVATE_CALLBACKS": "true", "RSHUB_CHANGELIST_SCAN_SECONDS": "0"}
        hubs.append(HubProcess(str(data), None, "--redis-url", backend.url, env=env).start())
    return hubs


@pytest.fixture
def hubs(tmp_path: Path, backend: Backend) -> Iterator[list[HubProcess]]:
    started = start_hubs(tmp_path, backend)
    yield started
    for hub in started:
        hub.stop()


async def node_of(session: aiohttp.ClientSession, hub: HubProcess) -> str:
    async with session.get(hub.url + "/healthz") as resp:
        return str((await resp.json())["node"])


async def subscribe_all(
    session: aiohttp.ClientSession, hubs: list[HubProcess], callbacks: Callbacks
) -> None:
    """Subscribe each callback through a different process, then wait until every one
    receives a probe change: verified, and its worker running on its owner."""
    for i in range(len(callbacks.received)):
        hub = hubs[i % len(hubs)]
        form = {
            "hub.mode": "subscribe",
            "hub.topic": f"{hub.url}/topics/{TOPIC}",
            "hub.callback": callbacks.url(i),
        }
        async with session.post(hub.url + "/", data=form) as resp:
            assert resp.status == 202, await resp.text()
    # The topic URL above names each process's own base URL, so all are the same topic.
    for _ in range(200):
        probe = await publish(session, hubs[0], changes(1, prefix="http://example.org/probe"))
        await asyncio.sleep(0.05)
        if all(probe[0] in r.ids for r in callbacks.received):
            break
    await wait_for(lambda: all(r.ids for r in callbacks.received), timeout=20)


async def settled(
    session: aiohttp.ClientSession, hubs: list[HubProcess], callbacks: Callbacks
) -> dict[int, str]:
    """Wait until each subscription is delivered by the process rendezvous hashing picks
    among the live ones (right after start-up, a process that has not yet seen the last
    one join may briefly hold a share that then moves); that owner of each callback."""
    nodes = [await node_of(session, hub) for hub in hubs]
    want = {
        i: placement.owner((TOPIC, callbacks.url(i)), nodes) for i in range(len(callbacks.received))
    }

    async def placed() -> bool:
        mark = await publish(session, hubs[0], changes(1, prefix="http://example.org/settle"))
        await wait_for(lambda: all(mark[0] in r.ids for r in callbacks.received), timeout=20)
        return all(r.deliveries[-1][1] == want[i] for i, r in enumerate(callbacks.received))

    await wait_for(placed, timeout=30, interval=0.5)
    return want


async def publish(
    session: aiohttp.ClientSession, hub: HubProcess, batch: list[dict[str, Any]]
) -> list[str]:
    async with session.post(
        f"{hub.url}/topics/{TOPIC}",
        data=notification(batch),
        headers={"Content-Type": "application/xml"},
    ) as resp:
        assert resp.status == 202, await resp.text()
        return list((await resp.json())["ids"])


async def publish_round_robin(
    session: aiohttp.ClientSession,
    targets: list[HubProcess],
    total: int,
    *,
    per_request: int = 20,
    start: int = 0,
) -> list[str]:
    """``total`` changes in requests spread round-robin over ``targets``, a few at a time."""
    ids: list[str] = []
    slots = asyncio.Semaphore(6)

    async def one(k: int) -> None:
        async with slots:
            batch = changes(per_request, start=start + k * per_request)
            ids.extend(await publish(session, targets[k % len(targets)], batch))

    await asyncio.gather(*(one(k) for k in range(total // per_request)))
    return sorted(ids, key=lambda i: tuple(int(p) for p in i.split("-")))


@dataclass
class StreamClient:
    transport: str
    hub: HubProcess
    since: str
    ids: list[str] = field(default_factory=list)
    task: asyncio.Task[None] | None = None
    #: Reconnect (and resume from the last id) when the connection is lost.
    persistent: bool = False


async def follow(session: aiohttp.ClientSession, client: StreamClient) -> None:
    stream = HubStream(
        session,
        client.hub.url,
        TOPIC,
        transport=client.transport,  # type: ignore[arg-type]
        since=client.since,
        persistent=client.persistent,
    )
    async for batch in stream.batches():
        client.ids.extend(str(e.id) for e in batch)


def order_key(event_id: str) -> tuple[int, int]:
    ms, seq = event_id.split("-")
    return int(ms), int(seq)


def first_occurrences(ids: list[str]) -> list[str]:
    return list(dict.fromkeys(ids))


async def test_three_hubs_deliver_every_change_once_in_order(
    backend: Backend, hubs: list[HubProcess], session: aiohttp.ClientSession
) -> None:
    async with Callbacks(20) as callbacks:
        await subscribe_all(session, hubs, callbacks)
        want = await settled(session, hubs, callbacks)
        already = {i: len(r.ids) for i, r in enumerate(callbacks.received)}
        delivered = {i: len(r.deliveries) for i, r in enumerate(callbacks.received)}
        last = (await publish(session, hubs[0], changes(1, prefix="http://example.org/mark")))[0]
        await wait_for(lambda: all(last in r.ids for r in callbacks.received), timeout=20)
        streams = [
            StreamClient("ws", hubs[0], last),
            StreamClient("sse", hubs[1], last),
            StreamClient("ws", hubs[2], last),
            StreamClient("sse", hubs[0], last),
        ]
        for client in streams:
            client.task = asyncio.create_task(follow(session, client))
        try:
            published = await publish_round_robin(session, hubs, 10_000)
            assert len(published) == 10_000
            await wait_for(
                lambda: all(published[-1] in r.ids for r in callbacks.received), timeout=60
            )
            await wait_for(lambda: all(len(c.ids) >= 10_000 for c in streams), timeout=60)
        finally:
            for client in streams:
                assert client.task is not None
                client.task.cancel()
    # Rendezvous hashing spreads the 20 subscriptions over the three processes, but by
    # chance (node ids are random) one of them may own none: 3 * (2/3)**20, about 0.1% of
    # runs. So: every process that placement names delivered, and it names more than one.
    placed = set(want.values())
    assert len(placed) >= 2, f"placement put every subscription on one process: {want}"
    owners = Counter(
        node
        for i, r in enumerate(callbacks.received)
        for _, node, _ in r.deliveries[delivered[i] :]
    )
    assert placed <= set(owners), f"deliveries should come from {placed}: {owners}"
    for i, r in enumerate(callbacks.received):
        mine = r.ids[already[i] :]
        after = mine[mine.index(last) + 1 :]
        assert after == published, f"callback {i}: not every change once, in order"
    for client in streams:
        assert client.ids == published, f"{client.transport} on {client.hub.url}"


async def test_sigkill_of_one_hub_loses_nothing_and_is_taken_over_in_time(
    backend: Backend, hubs: list[HubProcess], session: aiohttp.ClientSession
) -> None:
    async with Callbacks(20) as callbacks:
        await subscribe_all(session, hubs, callbacks)
        await settled(session, hubs, callbacks)
        nodes = [await node_of(session, hub) for hub in hubs]
        counts = Counter(r.deliveries[-1][1] for r in callbacks.received)
        victim = max(range(3), key=lambda k: counts[nodes[k]])
        owned = [
            i for i, r in enumerate(callbacks.received) if r.deliveries[-1][1] == nodes[victim]
        ]
        assert owned, "the victim should own some subscriptions"
        survivors = [hub for k, hub in enumerate(hubs) if k != victim]
        start = {i: len(r.ids) for i, r in enumerate(callbacks.received)}

        first = await publish_round_robin(session, hubs, 3_000)
        hubs[victim].kill()
        killed = time.monotonic()
        rest = await publish_round_robin(session, survivors, 7_000, start=3_000)
        published = sorted(first + rest, key=order_key)
        await wait_for(lambda: all(published[-1] in r.ids for r in callbacks.received), timeout=60)

    takeovers = []
    duplicates = {}
    for i, r in enumerate(callbacks.received):
        mine = r.ids[start[i] :]
        assert first_occurrences(mine) == published, f"callback {i} lost or reordered changes"
        dup = [e for e, n in Counter(mine).items() if n > 1]
        if dup:
            duplicates[i] = len(dup)
            last_batch = [ids for _, node, ids in r.deliveries if node == nodes[victim]][-1]
            assert set(dup) <= set(last_batch), "duplicates only of the batch in flight"
        if i in owned:
            after = [t for t, node, _ in r.deliveries if t > killed and node != nodes[victim]]
            takeovers.append(after[0] - killed)
    print(
        f"\n{backend.name}: killed a process owning {len(owned)}/20 subscriptions; takeover "
        f"{min(takeovers):.2f}-{max(takeovers):.2f} s; duplicate changes per affected "
        f"subscription: {duplicates or 'none'}"
    )
    assert max(takeovers) <= TAKEOVER_BOUND * TIME_SCALE
    assert set(duplicates) <= set(owned), "steady subscriptions got no duplicates"


async def test_a_paused_owner_delivers_nothing_more_and_moves_no_cursor_back(
    redis_server: EmbeddedRedis, tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    plain = redis.Redis.from_url(redis_server.url)
    plain.flushall()
    backend = Backend("redis", redis_server.url)
    started = start_hubs(tmp_path, backend)
    try:
        async with Callbacks(9) as callbacks:
            await subscribe_all(session, started, callbacks)
            await settled(session, started, callbacks)
            nodes = [await node_of(session, hub) for hub in started]
            victim_node = callbacks.received[0].deliveries[-1][1]
            victim = started[nodes.index(victim_node)]
            others = [h for h in started if h is not victim]
            assert victim.proc is not None

            victim.proc.send_signal(signal.SIGSTOP)
            try:

                def taken_over() -> bool:
                    owners = plain.hgetall(keys.owners(TOPIC))
                    return not any(v.startswith(victim_node.encode()) for v in owners.values())

                await wait_for(taken_over, timeout=15)
                while_paused = await publish_round_robin(session, others, 200)
                await wait_for(
                    lambda: all(while_paused[-1] in r.ids for r in callbacks.received),
                    timeout=20,
                )
                before = {
                    k.decode(): v.decode() for k, v in plain.hgetall(keys.cursors(TOPIC)).items()
                }
            finally:
                victim.proc.send_signal(signal.SIGCONT)
            resumed = time.monotonic()
            # It wakes with stale workers and events it has not delivered: it must not
            # deliver them, nor write a cursor, whatever it owns again later.
            samples = []
            for _ in range(20):
                samples.append(
                    {k.decode(): v.decode() for k, v in plain.hgetall(keys.cursors(TOPIC)).items()}
                )
                await asyncio.sleep(0.1)
            after_wake = await publish_round_robin(session, others, 200, start=200)
            await wait_for(
                lambda: all(after_wake[-1] in r.ids for r in callbacks.received), timeout=20
            )
    finally:
        plain.close()
        for hub in started:
            hub.stop()

    stale = set(while_paused)
    for r in callbacks.received:
        for t, node, ids in r.deliveries:
            if node == victim_node and t >= resumed:
                assert not stale & set(ids), "the woken process delivered what it had lost"
        assert Counter(e for e in r.ids if e in stale).most_common(1)[0][1] == 1
    for sample in samples:
        for callback, cursor in before.items():
            assert order_key(sample.get(callback, cursor)) >= order_key(cursor), (
                f"cursor of {callback} moved backwards"
            )


async def test_serve_with_two_workers_survives_a_killed_worker(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    hub = HubProcess(str(tmp_path), None, "--workers", "2").start()
    try:
        assert hub.proc is not None
        supervisor = hub.proc.pid
        await wait_for(lambda: len(worker_pids(supervisor)) == 2, timeout=20)
        workers = worker_pids(supervisor)
        pids = set()
        for _ in range(40):  # both processes answer on the one port
            async with session.get(hub.url + "/healthz") as resp:
                pids.add((await resp.json())["pid"])
        assert pids <= workers

        client = StreamClient("ws", hub, "0", persistent=True)
        client.task = asyncio.create_task(follow(session, client))
        ids = await publish(session, hub, changes(5))
        await wait_for(lambda: client.ids[-5:] == ids, timeout=10)

        doomed = sorted(workers)[0]
        os.kill(doomed, signal.SIGKILL)
        answered = 0
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and answered < 20:
            try:
                async with session.get(hub.url + "/healthz") as resp:
                    answered += resp.status == 200
            except aiohttp.ClientError:
                pass
        assert answered == 20, "the other worker keeps serving"
        await wait_for(
            lambda: len(kids := worker_pids(supervisor)) == 2 and doomed not in kids,
            timeout=20,
        )
        more = await publish(session, hub, changes(5, start=5))
        await wait_for(lambda: client.ids[-5:] == more, timeout=15)
        assert client.ids == [*ids, *more]  # resumed on the other worker, nothing lost
        client.task.cancel()
    finally:
        hub.stop()
    assert hub.proc.returncode == 0
    assert not _alive(doomed)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
