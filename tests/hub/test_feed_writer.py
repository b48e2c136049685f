"""Live clients written to directly by the feed's fan-out, and queued when they cannot take it.

In-memory: a :class:`TopicFeed` whose ring is filled by hand (no Redis is read).
"""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from hub.core.events import Event, EventFilter, format_id
from hub.live.feed import ClientStream, TopicFeed
from hub.store.event_store import EventStore
from tests.support import wait_for


def events(first: int, count: int) -> list[Event]:
    return [
        Event(
            format_id((first + i, 0)),
            b'{"loc":"http://e/%d","lastmod":"2026-01-01T00:00:00Z","change":"updated"}'
            % (first + i),
        )
        for i in range(count)
    ]


class Recorder:
    """A connection that takes every batch."""

    def __init__(self) -> None:
        self.written: list[list[Event]] = []

    def __call__(self, batch: list[Event]) -> bool:
        self.written.append(batch)
        return True


def live_client(writer: object = None, event_filter: EventFilter | None = None) -> ClientStream:
    feed = TopicFeed(cast(EventStore, None), "t")
    feed.base = (0, 0)
    client = ClientStream(feed, (0, 0), capacity=10, event_filter=event_filter)
    client.live = True
    feed.follow(client)
    client.writer = writer  # type: ignore[assignment]
    return client


async def push_pass() -> None:
    """Let the loop run one pass: the feed's push, scheduled by an append with ``call_soon``,
    runs in it, before this task resumes (deterministic: no time passes, nothing is polled)."""
    await asyncio.sleep(0)


async def test_a_connection_that_takes_the_batch_gets_it_at_once() -> None:
    written = Recorder()
    client = live_client(written)
    batch = events(1, 3)
    client.offer(batch)
    assert written.written == [batch]
    assert client.cursor == batch[-1].key and client.last_sent == batch[-1].id
    assert await client.next(0.01) is None  # nothing queued for the sender


async def test_a_backed_up_connection_queues_and_keeps_order() -> None:
    accept = [False]
    written: list[list[Event]] = []

    def writer(batch: list[Event]) -> bool:
        if accept[0]:
            written.append(batch)
        return accept[0]

    client = live_client(writer)
    first, second, third = events(1, 2), events(3, 2), events(5, 2)
    client.offer(first)  # refused: queued
    accept[0] = True
    client.offer(second)  # accepted by the connection, but must queue behind `first`
    assert written == []
    assert await client.next(0.01) == first + second
    client.offer(third)  # the queue is empty again: written at once
    assert written == [third]


async def test_a_queue_past_capacity_overflows() -> None:
    client = live_client(lambda batch: False)
    client.offer(events(1, 6))
    client.offer(events(7, 6))
    assert client.overflowed and client.stopped.done()


async def test_a_filtered_client_is_written_only_what_it_asked_for() -> None:
    written = Recorder()
    wanted = EventFilter.from_query({"change": "deleted"}, [])
    client = live_client(written, wanted)
    client.offer(events(1, 3))  # nothing matches: nothing written, cursor still moves
    assert written.written == [] and client.cursor == (3, 0)
    deleted = Event(
        format_id((4, 0)),
        b'{"loc":"http://e/4","lastmod":"2026-01-01T00:00:00Z","change":"deleted"}',
    )
    client.offer([deleted, *events(5, 1)])
    assert written.written == [[deleted]] and client.cursor == (5, 0)


async def test_a_local_publish_is_taken_only_when_it_follows_on() -> None:
    written = Recorder()
    client = live_client(written)
    feed = client.feed
    assert feed.take_local("", events(1, 2))  # the stream was empty, as the ring
    await push_pass()
    assert not feed.take_local("1-0", events(3, 1))  # an event (2-0) came in between
    assert feed.take_local("2-0", events(3, 2))
    await push_pass()
    assert [[e.id for e in batch] for batch in written.written] == [
        ["1-0", "2-0"],
        ["3-0", "4-0"],
    ]
    assert feed.last_key == (4, 0)
    assert [e.id for e in await feed.read_after((2, 0), 10)] == ["3-0", "4-0"]


async def test_appends_of_one_loop_pass_reach_a_live_client_in_one_write() -> None:
    """Appends answered together (the script pipe's replies to a batch of publishes, several
    notices in one read) are in the ring and wake its readers at once, and are pushed to
    the followers a pass of the loop later, as one batch (measured: a transport write per
    event and client was 62% of the hub's CPU with 8 publishers flat out)."""
    written = Recorder()
    client = live_client(written)
    feed = client.feed
    reader = asyncio.create_task(feed.read_after((0, 0), 10))
    await asyncio.sleep(0)
    assert feed.take_local("", events(1, 1))
    assert feed.take_local("1-0", events(2, 2))
    assert feed.last_key == (3, 0) and written.written == []  # in the ring, not yet pushed
    await push_pass()
    assert [[e.id for e in batch] for batch in written.written] == [["1-0", "2-0", "3-0"]]
    assert reader.done()  # woken by the first append, before the push
    assert [e.id for e in reader.result()] == ["1-0", "2-0", "3-0"]
    assert client.cursor == (3, 0)


async def test_a_client_that_catches_up_before_the_push_gets_each_event_once() -> None:
    """A client that read the ring up to its end and follows before the push is offered
    the pushed events too: it drops those it has, and takes the ones added after it
    followed, in the same push."""
    early = Recorder()
    client = live_client(early)
    feed = client.feed
    assert feed.take_local("", events(1, 2))
    late = Recorder()
    caught_up = ClientStream(feed, feed.last_key, capacity=10)  # read 1-0 and 2-0 already
    caught_up.live, caught_up.writer = True, late
    feed.follow(caught_up)
    assert feed.take_local("2-0", events(3, 1))
    await push_pass()
    assert [[e.id for e in batch] for batch in early.written] == [["1-0", "2-0", "3-0"]]
    assert [[e.id for e in batch] for batch in late.written] == [["3-0"]]
    assert caught_up.cursor == (3, 0)


async def test_a_stopped_feed_lets_go_of_its_ring() -> None:
    # A stopped feed may sit in reference cycles until a full GC pass; it must not keep
    # tens of thousands of events alive with it (they made that pass take 30-80 ms).
    client = live_client(Recorder())
    feed = client.feed
    assert feed.take_local("", events(1, 1000))
    feed.ws_frame(feed._events[:10])
    await feed.stop()
    assert not feed._events and not feed._keys and not feed._encodings and not feed._followers


async def test_sse_encodings_are_shared_by_unfiltered_clients_and_framed_as_chunks() -> None:
    feed = TopicFeed(cast(EventStore, None), "t")
    feed.base = (0, 0)
    one = ClientStream(feed, (0, 0), capacity=10)
    two = ClientStream(feed, (0, 0), capacity=10)
    filtered = ClientStream(feed, (0, 0), 10, EventFilter.from_query({"change": "updated"}, []))
    batch = events(1, 2)
    plain = b"".join(b"id: %s\ndata: %s\n\n" % (e.id.encode(), e.json("t")) for e in batch)
    assert one.sse_events(batch) == plain
    assert one.sse_events(batch, chunked=True) == b"%x\r\n%s\r\n" % (len(plain), plain)
    # Encoded once per batch: the very same bytes object for every unfiltered client.
    assert one.sse_events(batch, chunked=True) is two.sse_events(batch, chunked=True)
    assert filtered.sse_events(batch, chunked=True) == one.sse_events(batch, chunked=True)
    assert filtered.sse_events(batch, chunked=True) is not one.sse_events(batch, chunked=True)


async def test_a_stream_on_an_ended_topic_is_stopped_at_once() -> None:
    feed = TopicFeed(cast(EventStore, None), "t")
    feed.base = (0, 0)
    client = ClientStream(feed, (0, 0), capacity=10)
    assert not client.stopped.done() and feed.streams == {client}
    feed.ended.set()
    late = ClientStream(feed, (0, 0), capacity=10)  # opened as the topic was deleted
    assert late.stopped.done()
    client.close()
    late.close()
    assert not feed.streams


async def test_next_without_a_timeout_arms_no_timer_and_wakes_for_a_batch() -> None:
    client = live_client(None)  # no writer: every batch queues for the sender
    waiting = asyncio.create_task(client.next(None))
    await asyncio.sleep(0)
    assert client._waiter is not None and not waiting.done()
    batch = events(1, 2)
    client.offer(batch)
    assert await asyncio.wait_for(waiting, 5) == batch
    assert client._waiter is None


def _messages(transport: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("rshub_stream_messages_total", {"transport": transport}) or 0


async def test_direct_writes_are_counted_once_per_batch_and_transport() -> None:
    # The feed counts what its fan-out wrote (a Prometheus increment per client was a
    # third of the Python per delivery); a client that could not take the batch is not
    # counted here (its sender task counts it when it sends).
    feed = TopicFeed(cast(EventStore, None), "t")
    feed.base = (0, 0)
    clients = [
        ClientStream(feed, (0, 0), capacity=10, transport=transport)
        for transport in ("ws", "ws", "sse", "ws")
    ]
    for client, writer in zip(
        clients, (Recorder(), Recorder(), Recorder(), lambda _b: False), strict=True
    ):
        client.live = True
        client.writer = writer
        feed.follow(client)
    ws, sse = _messages("ws"), _messages("sse")
    assert feed.take_local("", events(1, 2))
    await push_pass()
    assert (_messages("ws") - ws, _messages("sse") - sse) == (2, 1)
    assert feed.take_local("2-0", events(3, 1))
    await push_pass()
    assert (_messages("ws") - ws, _messages("sse") - sse) == (4, 2)
    queued = await clients[3].next(0.01)
    assert queued is not None and [e.id for e in queued] == ["1-0", "2-0", "3-0"]  # in order


class Clock:
    """The feed's clock, moved by hand: a push "takes" what its writer says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def costly_client(cost: float, push_delay_max: float) -> tuple[ClientStream, list[list[Event]]]:
    """A live client on a feed whose every write to it takes ``cost`` seconds of its clock."""
    clock = Clock()
    feed = TopicFeed(cast(EventStore, None), "t", push_delay_max=push_delay_max, clock=clock)
    feed.base = (0, 0)
    written: list[list[Event]] = []

    def writer(batch: list[Event]) -> bool:
        written.append(batch)
        clock.now += cost
        return True

    client = ClientStream(feed, (0, 0), capacity=100, writer=writer)
    client.live = True
    feed.follow(client)
    return client, written


def ids(written: list[list[Event]]) -> list[list[str]]:
    return [[e.id for e in batch] for batch in written]


async def test_after_a_costly_push_the_next_waits_and_takes_what_came_meanwhile() -> None:
    """Under load the fan-out takes at most a fifth of the time, and batches grow instead
    (measured: with 100 clients and 8 publishers flat out, a write per client every ~3
    events was most of the hub's CPU): a push of two appends that took 2 ms is followed by
    the next no sooner than 8 ms later, with every append of those passes in one write."""
    client, written = costly_client(cost=0.002, push_delay_max=1.0)
    feed = client.feed
    loop = asyncio.get_running_loop()
    assert feed.take_local("", events(1, 1))
    assert feed.take_local("1-0", events(2, 1))  # two appends in one pass: under load
    await push_pass()
    assert ids(written) == [["1-0", "2-0"]]
    pushed = loop.time()
    assert feed.take_local("2-0", events(3, 1))
    await push_pass()
    assert feed.take_local("3-0", events(4, 2))
    await push_pass()
    assert ids(written) == [["1-0", "2-0"]] and feed.last_key == (5, 0)  # in the ring
    await wait_for(lambda: len(written) == 2, timeout=5)
    assert ids(written) == [["1-0", "2-0"], ["3-0", "4-0", "5-0"]]
    assert loop.time() - pushed >= 0.006  # 4 x 2 ms (libuv's timers are in whole ms)
    assert client.cursor == (5, 0)


async def push_two(feed: TopicFeed, first: int) -> None:
    """Two appends in one pass of the loop, then that pass's push."""
    previous = format_id((first - 1, 0)) if first > 1 else ""
    assert feed.take_local(previous, events(first, 1))
    assert feed.take_local(format_id((first, 0)), events(first + 1, 1))
    await push_pass()


async def test_a_push_of_one_append_never_delays_the_next() -> None:
    # Paced publishes: each push carries one append, however long its writes take.
    client, written = costly_client(cost=10.0, push_delay_max=1.0)
    feed = client.feed
    for n in range(1, 4):
        assert feed.take_local(format_id((n - 1, 0)) if n > 1 else "", events(n, 1))
        await push_pass()
    assert ids(written) == [["1-0"], ["2-0"], ["3-0"]]


async def test_the_wait_is_bounded_by_push_delay_max() -> None:
    client, written = costly_client(cost=10.0, push_delay_max=0.02)  # 4 x 10 s: not waited
    feed = client.feed
    await push_two(feed, 1)
    assert feed.take_local("2-0", events(3, 1))
    await wait_for(lambda: len(written) == 2, timeout=5)
    assert ids(written) == [["1-0", "2-0"], ["3-0"]]


@pytest.mark.parametrize(
    ("cost", "push_delay_max"),
    [
        pytest.param(10.0, 0, id="spacing-off"),
        # 0.2 ms of writes: the next push would wait 0.8 ms, less than a timer is worth.
        pytest.param(0.0002, 1.0, id="cheap-push"),
    ],
)
async def test_pushes_every_pass_without_spacing_or_when_cheap(
    cost: float, push_delay_max: float
) -> None:
    client, written = costly_client(cost=cost, push_delay_max=push_delay_max)
    feed = client.feed
    await push_two(feed, 1)
    await push_two(feed, 3)
    assert ids(written) == [["1-0", "2-0"], ["3-0", "4-0"]]


async def test_stopping_the_feed_cancels_a_waiting_push() -> None:
    client, written = costly_client(cost=0.5, push_delay_max=1.0)
    feed = client.feed
    await push_two(feed, 1)
    assert feed.take_local("2-0", events(3, 1))
    timer = feed._push_timer
    assert timer is not None and not timer.cancelled()
    await feed.stop()
    assert timer.cancelled() and feed._push_timer is None and ids(written) == [["1-0", "2-0"]]
