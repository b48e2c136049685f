"""The feed's fan-out starts where Redis's answer to its ``XREAD`` arrives.

:attr:`hub.store.stream_tail.StreamTail.arrived` hands a read's rows to the feed in the
connection's ``data_received``, before the reading task resumes: no task hop, and ahead of
the other callbacks ready in that loop pass. A real hub on a real Redis; what is checked
is who runs the fan-out (no task at all) and that order and once-only delivery hold, for
live clients and WebSub callbacks, with events of this process and of "another" one,
and that one callback's slow answer holds back no other callback's POST.
"""

from __future__ import annotations

import asyncio
import logging

import orjson
import pytest

from hub.core.events import Change, Event
from hub.web.app import RUNTIME
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_delivery_offer import workers_of
from tests.hub.test_feed_tail import change, key, live
from tests.hub.test_websub import subscribe
from tests.support import changes, notification, wait_for


def stored_change(i: int) -> list[Change]:
    """A change as the hub stores a parsed one (renderable for WebSub)."""
    loc = f"http://example.org/other/{i}"
    fields = {"loc": loc, "lastmod": "2026-01-01T00:00:00Z", "change": "updated"}
    return [Change(loc, "updated", orjson.dumps(fields))]


class TaskRecorder:
    """A live client's writer noting which task (if any) wrote each batch."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.tasks: list[asyncio.Task[object] | None] = []

    def __call__(self, batch: list[Event]) -> bool:
        self.ids.extend(e.id for e in batch)
        self.tasks.append(asyncio.current_task())
        return True


async def test_another_process_events_are_fanned_out_where_redis_answers(hub: Hub) -> None:
    runtime = hub.app[RUNTIME]
    runtime.feeds.follow_by_xread()  # where the store has no connection of its own
    await runtime.store.append("t", change(0))
    feed, client, _ = await live(hub, "t")
    recorder = client.writer = TaskRecorder()
    try:
        stored = []
        for i in range(1, 6):  # as another process would: only the feed's XREAD sees them
            stored += (await runtime.store.append("t", change(i))).ids
            await wait_for(lambda n=len(stored): len(recorder.ids) >= n, 10)
        assert recorder.ids == stored
        # Written from the Redis connection's callback, not after the feed's task resumed.
        assert recorder.tasks == [None] * len(recorder.tasks)
        assert feed._task is not None and not feed._task.done()
    finally:
        client.close()
        await runtime.feeds.release(feed)


async def test_a_failing_hand_over_is_logged_and_the_read_still_returns_its_rows(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    runtime = hub.app[RUNTIME]
    first = (await runtime.store.append("h", change(0))).ids
    reader = runtime.store.tail("h")
    handed: list[list[tuple[str, bytes]]] = []

    def arrived(rows: list[tuple[str, bytes]]) -> None:
        handed.append(rows)
        raise RuntimeError("a bug in the hand-over")

    reader.arrived = arrived
    try:
        rows = await reader.after("0", 10, 1000)
        assert [eid for eid, _ in rows] == first
        assert handed == [rows]  # given to the hand-over first, converted once
        assert "handling a Redis reply where it arrived failed" in caplog.text
        assert any(r.levelno == logging.ERROR for r in caplog.records)
        # The connection stays in step: the next read answers the next append.
        read = asyncio.create_task(reader.after(first[-1], 10, 5000))
        second = (await runtime.store.append("h", change(1))).ids
        assert [eid for eid, _ in await asyncio.wait_for(read, 10)] == second
        assert len(handed) == 2
    finally:
        reader.close()


async def test_back_to_back_publishes_reach_live_clients_and_callbacks_in_order(
    hub: Hub,
) -> None:
    runtime = hub.app[RUNTIME]
    callbacks = [await CallbackServer().start() for _ in range(2)]
    try:
        for server in callbacks:
            await subscribe(hub, server, topic="o")
        feed, client, recorder = await live(hub, "o")
        try:

            async def publish(i: int) -> list[str]:
                if i % 4 == 0:  # as another process would: only the feed's XREAD sees it
                    return (await runtime.store.append("o", stored_change(i))).ids
                resp = await hub.publish("o", notification(changes(1 + i % 3, start=10 * i)))
                assert resp.status == 202, await resp.text()
                return list((await resp.json())["ids"])

            stored: list[str] = []
            for first in range(0, 40, 8):  # bursts of concurrent publishes, back to back
                for ids in await asyncio.gather(*(publish(i) for i in range(first, first + 8))):
                    stored += ids
            expected = sorted(stored, key=key)
            await wait_for(lambda: len(recorder.ids) >= len(expected), 10)
            await wait_for(lambda: all(len(s.ids) >= len(expected) for s in callbacks), 20)
            await asyncio.sleep(0)  # a duplicate would be written in the same pass
            assert recorder.ids == expected  # once each, in stream order
            for server in callbacks:
                assert server.ids == expected
        finally:
            client.close()
            await runtime.feeds.release(feed)
    finally:
        for server in callbacks:
            await server.stop()


async def test_a_callback_answering_slowly_holds_back_no_other_callbacks_post(hub: Hub) -> None:
    """A worker still waiting for its callback's answer is not offered the next publish
    (its task delivers it after the answer, in order); the others' POSTs of that publish
    are written by the fan-out all the same."""
    slow = await CallbackServer(gate=asyncio.Event()).start()
    fast = [await CallbackServer().start() for _ in range(2)]
    try:
        for server in [slow, *fast]:
            await subscribe(hub, server, topic="s")
        workers = {w.sub.callback: w for w in workers_of(hub, [slow, *fast])}
        await wait_for(lambda: all(w._offered is not None for w in workers.values()))
        sent = {url: w.offers_sent for url, w in workers.items()}
        ids: list[str] = []
        for i in range(2):
            # The fast workers wait caught up again (their cursor written) before each.
            await wait_for(lambda: all(workers[s.url]._offered is not None for s in fast))
            resp = await hub.publish("s", notification(changes(1, start=i)))
            ids += (await resp.json())["ids"]
            await wait_for(lambda n=len(ids): all(len(s.ids) >= n for s in fast), 10)
            # Every fast callback has this publish while the slow one has not answered
            # the first: its wait is in no one else's way.
            assert slow.deliveries == []
            for server in fast:
                assert workers[server.url].offers_sent == sent[server.url] + i + 1
        assert workers[slow.url].offers_sent == sent[slow.url] + 1  # the second: its task's
        assert slow.gate is not None
        slow.gate.set()
        await wait_for(lambda: len(slow.ids) >= 2, 20)
        for server in [slow, *fast]:
            assert server.ids == ids
    finally:
        for server in [slow, *fast]:
            await server.stop()
