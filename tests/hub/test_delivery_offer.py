"""A caught-up delivery worker's POST is started by the feed's own fan-out.

The feed hands a publish's events to every caught-up worker (``DeliveryWorker.offer``) and
each POST is written there, in one loop turn, instead of after a task switch per worker.
Counted, never timed: ``offers_sent`` / ``offers_declined`` say which path each took.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from hub.core.events import Event
from hub.core.exceptions import CallbackFailed
from hub.core.settings import Settings
from hub.core.token_bucket import TokenBucket
from hub.live.callback_connections import CallbackConnections
from hub.live.http_client import HttpClient
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_callback_connections import NO_CONTENT, Scripted, ScriptedServer, on_both_loops
from tests.hub.test_websub import hub_workers, subscribe
from tests.support import changes, notification, wait_for
from tests.watchdog import Watchdog


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"retry_base_seconds": 0.05, "retry_max_seconds": 0.2}


@pytest.fixture
async def callbacks() -> AsyncIterator[list[CallbackServer]]:
    servers = [await CallbackServer().start() for _ in range(3)]
    yield servers
    for server in servers:
        await server.stop()


def workers_of(hub: Hub, servers: list[CallbackServer]) -> list[Any]:
    urls = {s.url for s in servers}
    return [w for key, w in hub_workers(hub).items() if key[1] in urls]


async def test_a_publish_starts_every_caught_up_workers_post_in_the_feed(
    hub: Hub, callbacks: list[CallbackServer]
) -> None:
    for i, server in enumerate(callbacks):
        extra = {"hub.secret": f"secret-{i}"} if i == 0 else {}
        await subscribe(hub, server, **extra)
    first = await (await hub.publish("t", notification(changes(2)))).json()
    await wait_for(lambda: all(len(s.ids) >= 2 for s in callbacks))
    workers = workers_of(hub, callbacks)
    # Workers wait caught up again once their cursor write is done.
    await wait_for(lambda: all(w._offered is not None for w in workers))
    sent = [w.offers_sent for w in workers]
    declined = [w.offers_declined for w in workers]

    second = await (await hub.publish("t", notification(changes(3, start=2)))).json()
    await wait_for(lambda: all(len(s.ids) >= 5 for s in callbacks))
    # Each POST of this publish was started by the feed's hand-over, none by a task's read.
    assert [w.offers_sent for w in workers] == [n + 1 for n in sent]
    assert [w.offers_declined for w in workers] == declined
    for server in callbacks:
        assert server.ids == first["ids"] + second["ids"]  # in order, once each
        last = server.deliveries[-1]
        assert last.headers["X-RSHub-First-Event-Id"] == second["ids"][0]
        assert last.headers["X-RSHub-Event-Count"] == "3"
        assert "X-RSHub-Subscription" in last.headers
    assert all(callbacks[0].signature_ok("secret-0"))
    assert "X-Hub-Signature" not in callbacks[1].deliveries[-1].headers
    for worker in workers:
        await wait_for(lambda w=worker: w.delivered == 5 and not w.posting)


async def test_an_offer_of_events_read_before_the_wait_starts_nothing(
    hub: Hub, callbacks: list[CallbackServer]
) -> None:
    """The feed pushes a pass of the loop after it adds (``TopicFeed._push``): a worker
    that read the events from the ring and waits caught up before that push is offered
    them again, and must not post them twice; what is new in the offer is posted once."""
    server = callbacks[0]
    await subscribe(hub, server)
    first = await (await hub.publish("t", notification(changes(2)))).json()
    await wait_for(lambda: len(server.ids) == 2)
    [worker] = workers_of(hub, [server])
    await wait_for(lambda: worker._offered is not None and not worker.posting)
    feed = worker._feed
    read = await feed.read_after((0, 0), 10)
    assert [e.id for e in read] == first["ids"]
    sent, waiting = worker.offers_sent, worker._offered
    worker.offer(read)  # all of it delivered already: nothing happens
    assert worker.offers_sent == sent and worker._offered is waiting and not waiting.done()
    second = await (await hub.publish("t", notification(changes(1, start=2)))).json()
    await wait_for(lambda: len(server.ids) == 3)
    assert server.ids == first["ids"] + second["ids"]  # once each, in order
    assert worker.offers_sent == sent + 1


async def test_a_failed_first_attempt_is_retried_by_the_worker(
    hub: Hub, callbacks: list[CallbackServer]
) -> None:
    server = callbacks[0]
    await subscribe(hub, server)
    await hub.publish("t", notification(changes(1)))
    await wait_for(lambda: len(server.ids) == 1)
    [worker] = workers_of(hub, [server])
    await wait_for(lambda: worker._offered is not None)
    sent = worker.offers_sent
    server.statuses = [503, 500]
    body = await (await hub.publish("t", notification(changes(2, start=1)))).json()
    await wait_for(lambda: len(server.ids) == 3)
    assert worker.offers_sent == sent + 1 and server.refused == 2
    assert server.ids[1:] == body["ids"]
    await wait_for(lambda: worker.sub.failures == 0)


async def test_a_worker_stopped_before_its_task_resumed_gives_its_post_up(
    hub: Hub, callbacks: list[CallbackServer]
) -> None:
    from hub.web.app import RUNTIME

    server = callbacks[0]
    await subscribe(hub, server)
    await hub.publish("t", notification(changes(1)))
    await wait_for(lambda: len(server.ids) == 1)
    [worker] = workers_of(hub, [server])
    await wait_for(lambda: worker._offered is not None)
    delivery = hub.app[RUNTIME].delivery
    client = delivery.client
    free, sent = client._delivery_slots.free, worker.offers_sent
    # The feed's hand-over, then a stop before the worker's task ran again.
    stored = worker._feed._events[-1].data  # a real stored change, under an id not yet used
    worker.offer([Event("9999999999999-0", stored)])
    assert worker.offers_sent == sent + 1 and worker.posting
    assert client._delivery_slots.free == free - 1
    await delivery.stop_worker(worker.sub.key, planned=False)
    assert not worker.posting and worker._idle.is_set()
    assert client._delivery_slots.free == free
    assert not client.connections._busy
    assert worker.delivered == 1  # nothing was counted as delivered


def test_a_refunded_token_is_taken_again() -> None:
    bucket = TokenBucket(rate=1.0, burst=1, now=0.0)
    assert bucket.take(0.0) == 0.0
    bucket.refund()
    assert bucket.take(0.0) == 0.0
    assert bucket.take(0.0) > 0
    bucket.refund()
    bucket.refund()  # never beyond the burst
    assert bucket.take(0.0) == 0.0 and bucket.take(0.0) > 0


@on_both_loops
async def test_begin_post_writes_only_on_an_idle_connection() -> None:
    srv = ScriptedServer([NO_CONTENT] * 4)
    url = await srv.start()
    pool = CallbackConnections(allow_private=True)
    try:
        assert pool.begin_post(url, b"<a/>", {}, 5.0) is None  # nothing to reuse: nothing sent
        assert await pool.post(url, b"<b/>", {"X-N": "1"}, 5.0) == (204, {"retry-after": "7"})
        started = pool.begin_post(url, b"<c/>", {"X-N": "2"}, 5.0)
        assert started is not None and started.connection in pool._busy
        assert await pool.finish(started) == (204, {"retry-after": "7"})
        again = pool.begin_post(url, b"<d/>", {}, 5.0)
        assert again is not None
        pool.abandon(again)  # its answer would come on a connection nobody reads: closed
        assert again.connection.closed and not pool._busy
        assert await pool.post(url, b"<e/>", {}, 5.0) == (204, {"retry-after": "7"})
    finally:
        await pool.close()
        srv.server.close()
    assert [body for _, body in srv.requests] == [b"<b/>", b"<c/>", b"<d/>", b"<e/>"]
    assert "X-N: 2" in srv.requests[1][0]
    assert srv.connections == 2


@on_both_loops
async def test_begin_post_takes_a_delivery_slot_or_sends_nothing() -> None:
    srv = ScriptedServer([NO_CONTENT] * 4)
    url = await srv.start()
    client = HttpClient(Settings(delivery_concurrency=1, allow_private_callbacks=True))
    try:
        await client.post(url, b"<a/>", {})
        started = client.begin_post(url, b"<b/>", {})
        assert started is not None
        assert client.begin_post(url, b"<c/>", {}) is None  # the one slot is taken
        queued = asyncio.ensure_future(client.post(url, b"<d/>", {}))
        await asyncio.sleep(0)
        assert not queued.done()
        assert (await client.finish_post(started)).status == 204
        assert (await queued).status == 204  # the slot was handed over
        assert client.begin_post("not a url", b"<x/>", {}) is None  # a CallbackFailed: nothing sent
        assert client._delivery_slots.free == 1
    finally:
        await client.close()
        srv.server.close()
    assert [body for _, body in srv.requests] == [b"<a/>", b"<b/>", b"<d/>"]


class TrackedServer(ScriptedServer):
    """A :class:`ScriptedServer` that keeps its protocols, to close them from the test."""

    async def start(self) -> str:
        self.protocols: list[Scripted] = []

        def make() -> Scripted:
            proto = Scripted(self)
            self.protocols.append(proto)
            return proto

        self.server = await asyncio.get_running_loop().create_server(make, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/cb/1"


@on_both_loops
async def test_a_begun_post_on_a_connection_the_callback_closed_is_sent_again() -> None:
    srv = TrackedServer([NO_CONTENT] * 2)
    url = await srv.start()
    pool = CallbackConnections(allow_private=True)
    closed: list[asyncio.Transport] = []
    try:
        await pool.post(url, b"<a/>", {}, 5.0)
        # The callback drops the idle connection; the pool has not seen it yet.
        for proto in list(srv.protocols):
            proto.transport.close()
            closed.append(proto.transport)
        started = pool.begin_post(url, b"<b/>", {}, 5.0)
        assert started is not None
        assert await pool.finish(started) == (204, {"retry-after": "7"})
    finally:
        await pool.close()
        srv.server.close()
    assert closed and [body for _, body in srv.requests] == [b"<a/>", b"<b/>"]
    assert srv.connections == 2


async def test_hostile_answers_to_begun_posts_fail_them_and_leak_nothing() -> None:
    """A seeded fuzz: answers mangled byte by byte, cut short, or followed by junk, to POSTs
    started by begin_post. Each ends in an answer or a CallbackFailed; nothing stays busy."""
    rng = random.Random(22)
    valid = [NO_CONTENT, b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"]
    replies: list[bytes | None] = []
    for _ in range(150):
        reply = bytearray(rng.choice(valid))
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(reply))
            reply[at] = rng.choice(b"\x00\r\n :\xff9aZ")
        kind = rng.random()
        if kind < 0.2:
            reply = reply[: rng.randrange(1, len(reply))]  # cut short, then closed
        elif kind < 0.3:
            reply += b"HTTP/1.1 204 No Content\r\n\r\n"  # an answer nobody asked for
        replies.append(bytes(reply) if kind >= 0.2 else None)
    # A good answer for each warm-up POST, then the mangled one; spares for the retries.
    srv = TrackedServer([r for reply in replies for r in (NO_CONTENT, reply)] + [NO_CONTENT] * 50)
    url = await srv.start()
    pool = CallbackConnections(allow_private=True)
    answered = failed = 0
    async with Watchdog() as dog:
        try:
            for _ in range(len(replies)):
                try:
                    await pool.post(url, b"<warm/>", {}, 2.0)  # an idle connection to reuse
                except CallbackFailed:
                    pass
                started = pool.begin_post(url, b"<x/>", {"X-N": "1"}, 2.0)
                if started is None:
                    continue
                try:
                    status, _ = await pool.finish(started)
                    assert 100 <= status <= 999
                    answered += 1
                except CallbackFailed:
                    failed += 1
                assert started.connection not in pool._busy
        finally:
            await pool.close()
            srv.server.close()
            await srv.server.wait_closed()
        await dog.sockets_back()
    assert failed > 0 and answered > 0
