"""Live fan-out: the in-memory tail of each followed topic, and each client's cursor in it.

Each followed topic has a bounded ring of :class:`Event`\\ s, fed by this process's own
appends (handed over from the append's reply) and by the other processes' appends, heard of
by tail notice (:mod:`hub.store.tail_notices`): a notice that does not follow on from the
ring, or an own append that does not, waits for the batches before it, and a gap they do not
close soon is read from the stream after the ring's last id. On a Redis Cluster, where the
store has no connection of its own for notices, one task per topic blocks on ``XREAD``
instead. Consumers (WebSocket and SSE clients, WebSub delivery workers) ask for the events
after their cursor: from the ring when it covers the cursor, from Redis (``XRANGE``) when the
cursor is older, so a consumer never sees a gap and every live event is read from Redis once
however many consumers follow it.
Encodings (the client JSON, the ``<url>`` XML, WebSocket messages) are computed once and
shared.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

from hub.core import frames, metrics, sse
from hub.core.damage import DamageLog
from hub.core.events import Event, EventFilter, EventKey, format_id, parse_id
from hub.core.exceptions import DamagedData
from hub.core.retrying import STORE_OUTAGE, retrying
from hub.core.tasks import Tasks, cancel_and_wait
from hub.live import wakeups
from hub.store.event_store import Appended, EventStore
from hub.store.redis_connection import StoreError
from hub.store.stream_tail import StreamTail
from hub.store.tail_notices import Notice, TailNotices

log = logging.getLogger(__name__)
#: Damaged stream entries the feeds went past, said once (hub.core.damage).
_damage = DamageLog(log)

T = TypeVar("T")

#: XREAD BLOCK time; the store's blocking client has no socket timeout.
_BLOCK_MS = 5000
#: Events a client catching up reads per step.
_READ_BATCH = 1000
#: Seconds to connect and subscribe for tail notices.
_NOTICES_TIMEOUT = 10.0
#: What :meth:`Follower.offer` names when it wrote a batch directly (counted per batch).
_TRANSPORTS = ("ws", "sse")
#: Seconds a batch that does not follow on from the ring waits for the batches before it
#: (:meth:`TopicFeed.hold`) before the gap is read from Redis.
_HOLD_SECONDS = 0.05
#: Batches held at most: one more, and the gap is read at once.
_HOLD_BATCHES = 64
#: After a push of several appends that took ``t`` seconds, the next one waits until
#: ``_PUSH_SPACING * t`` has passed (at most the feed's ``push_delay_max``): see
#: :meth:`TopicFeed._push`.
_PUSH_SPACING = 4.0
#: A shorter wait is not worth a timer (libuv's are in whole milliseconds): the next pass
#: of the loop pushes, as it always did for fan-outs this cheap.
_PUSH_WAIT_MIN = 0.001


async def _through_outage(attempt: Callable[[], Awaitable[T]], what: str) -> T:
    """``attempt()`` until Redis answers: each failure counted, logged and backed off from."""
    return await retrying(
        attempt,
        STORE_OUTAGE,
        retry_on=StoreError,
        log=log,
        what=what,
        failed=lambda _error, _delay: metrics.redis_error(),
    )


@dataclass(slots=True)
class _Encoding:
    """One batch as every unfiltered live client gets it: the message, and (once a client
    is written to directly) the same message as a WebSocket frame, and as SSE events (plain
    and as an HTTP chunk)."""

    message: bytes
    frame: bytes | None = None
    sse: bytes | None = None
    sse_chunk: bytes | None = None


class Span(NamedTuple):
    """Events after a cursor, and whether retention removed some before they were read."""

    events: list[Event]
    #: Id of the last event after the cursor that was trimmed unread (None: no gap).
    trimmed_through: str | None


class Follower(Protocol):
    def offer(self, events: list[Event]) -> str | None:
        """Take a new batch; the transport's name (``ws``, ``sse``) when written to the
        connection there and then: the feed counts those writes once per batch."""


#: Writes events to a client's connection now, if it can take them without waiting; False
#: when it cannot (they are queued for the client's sender task instead).
Writer = Callable[[list[Event]], bool]


class TopicFeed:
    """The live tail of one topic; see the module docstring."""

    def __init__(
        self,
        store: EventStore,
        topic: str,
        *,
        ring_events: int = 50_000,
        read_count: int = 1000,
        push_delay_max: float = 0.005,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.store = store
        self.topic = topic
        self.ring_events = ring_events
        self.read_count = read_count
        #: The longest a live event waits for a push (0: every pass of the loop pushes).
        self.push_delay_max = push_delay_max
        self._clock = clock
        self._events: list[Event] = []
        self._keys: list[EventKey] = []
        #: The ring holds every event with id > base (and <= its last event).
        self.base: EventKey | None = None
        self._waiters: set[asyncio.Future[bool]] = set()
        self._task: asyncio.Task[None] | None = None
        #: The blocked XREAD's own connection (hub.store.stream_tail).
        self._reader: StreamTail | None = None
        self.consumers = 0
        self._followers: set[Follower] = set()
        #: This process's node id when the feed follows by tail notice (None: by XREAD).
        self._node: str | None = None
        self._tasks: Tasks | None = None
        #: Reading the stream to close a gap, and whether another gap came meanwhile.
        self._catching: asyncio.Task[None] | None = None
        self._again = False
        #: A notice or an own append came before the start knew where the ring begins.
        self._missed = False
        self._encodings: OrderedDict[tuple[str, str], _Encoding] = OrderedDict()
        #: The batch being fanned out and its encoding: every live client of it asks for
        #: the same list, found by identity before the keyed cache.
        self._last: tuple[list[Event], _Encoding] | None = None
        #: Set when the topic was deleted: its streams end (see :meth:`FeedHub.end`).
        self.ended = asyncio.Event()
        #: The client streams on this feed, stopped when it ends.
        self.streams: set[ClientStream] = set()
        #: Events in the ring not yet pushed to the followers, and whether the push is
        #: scheduled (:meth:`_add`).
        self._unpushed: list[Event] = []
        #: How many appends (or notices, or reads) those events came in.
        self._unpushed_batches = 0
        self._push_soon = False
        #: When (``clock``) the next push may run, and its timer while it waits for that.
        self._push_after = 0.0
        self._push_timer: asyncio.TimerHandle | None = None
        #: Batches that do not follow on from the ring yet, by the key they follow on
        #: from, and the timer that reads the gap if they wait too long (:meth:`hold`).
        self._held: dict[EventKey, list[Event]] = {}
        self._hold_timer: asyncio.TimerHandle | None = None

    def ws_message(self, events: list[Event]) -> bytes:
        """A JSON array of ``events`` (UTF-8), cached: live clients get identical batches."""
        return self._encoding(events).message

    def ws_frame(self, events: list[Event]) -> bytes:
        """:meth:`ws_message` as a WebSocket text frame, cached with it."""
        encoding = self._encoding(events)
        if encoding.frame is None:
            encoding.frame = frames.text_frame(encoding.message)
        return encoding.frame

    def sse_events(self, events: list[Event], *, chunked: bool) -> bytes:
        """``events`` as SSE ``id:``/``data:`` events (``chunked``: as one HTTP chunk),
        cached with the WebSocket encodings: live clients get identical batches."""
        encoding = self._encoding(events)
        if encoding.sse is None:
            encoding.sse = sse.event_lines((e.id, e.json(self.topic)) for e in events)
        if not chunked:
            return encoding.sse
        if encoding.sse_chunk is None:
            encoding.sse_chunk = sse.http_chunk(encoding.sse)
        return encoding.sse_chunk

    def _encoding(self, events: list[Event]) -> _Encoding:
        last = self._last
        if last is not None and last[0] is events:
            return last[1]
        key = (events[0].id, events[-1].id)
        encoding = self._encodings.get(key)
        if encoding is None:
            message = b"[" + b",".join(e.json(self.topic) for e in events) + b"]"
            encoding = self._encodings[key] = _Encoding(message)
            if len(self._encodings) > 64:
                self._encodings.popitem(last=False)
        self._last = (events, encoding)
        return encoding

    async def start(self, tasks: Tasks, node: str | None = None) -> None:
        """Start following: by tail notice when ``node`` (this process's id in the topics'
        tails sets) is given, else by a blocked XREAD in a task of ``tasks`` (the hub's
        feeds group, which also runs the reads that close gaps)."""
        self._tasks = tasks
        if node is not None:
            self._node = node
            last = await self.store.follow(self.topic, node)
            self.base = parse_id(last) if last else (0, 0)
            if self._missed:
                self.catch_up()
            return
        last = await self.store.last_id(self.topic)
        self.base = parse_id(last) if last else (0, 0)
        self._reader = self.store.tail(self.topic)
        self._reader.arrived = self._take_rows
        self._task = tasks.spawn(f"feed:{self.topic}", self._tail())

    @property
    def by_notice(self) -> bool:
        return self._node is not None

    async def stop(self) -> None:
        await cancel_and_wait([self._task, self._catching])
        if self._reader is not None:
            self._reader.arrived = None  # no cycle back to this feed once it stopped
            self._reader.close()
        # Drop the ring now: a stopped feed can sit in reference cycles (its task, its
        # waiters) until a full GC pass, which then had tens of thousands of events to free
        # at once (a 30-80 ms pause, bench/hub.py with gc.callbacks).
        self._events.clear()
        self._keys.clear()
        self._drop_held()
        if self._push_timer is not None:
            self._push_timer.cancel()
            self._push_timer = None
        self._unpushed = []
        self._unpushed_batches = 0
        self._push_soon = False
        self._encodings.clear()
        self._last = None
        self._followers.clear()

    @property
    def last_key(self) -> EventKey:
        assert self.base is not None
        return self._keys[-1] if self._keys else self.base

    async def _tail(self) -> None:
        reader = self._reader
        assert reader is not None

        past = (0, 0)  # a damaged entry read past, when after the ring's last event

        async def read() -> list[tuple[str, bytes]]:
            return await reader.after(format_id(max(self.last_key, past)), 5000, _BLOCK_MS)

        while True:
            # Read directly; only a failure goes to the retrying loop (its back-off state
            # and async iteration were made per read, i.e. per publish).
            try:
                rows = await read()
            except StoreError as exc:
                rows = await self._read_again(read, exc)
            except DamagedData as exc:
                if exc.entry_id is None:
                    raise
                rows = await self._around(exc.entry_id, exc)
                past = parse_id(exc.entry_id)
            self._take_rows(rows)

    def _take_rows(self, rows: list[tuple[str, bytes]]) -> None:
        """Add the rows of a read that are new to the ring. Called by the reader where
        Redis's reply arrives (:attr:`StreamTail.arrived`: no task hop before the fan-out),
        then again by :meth:`_tail` with the same rows, which are no longer new then."""
        last = self.last_key
        if not rows or parse_id(rows[-1][0]) <= last:
            return  # taken already: where they arrived, or by the publish path (take_local)
        fresh = [event for eid, data in rows if (event := Event(eid, data)).key > last]
        self._add(fresh)

    async def _read_again(
        self, read: Callable[[], Awaitable[list[tuple[str, bytes]]]], error: StoreError
    ) -> list[tuple[str, bytes]]:
        """After ``read`` failed with ``error``: the hub's retrying loop, which counts, logs
        and backs off from that first failure on as from any other."""
        failure: list[StoreError] = [error]

        async def attempt() -> list[tuple[str, bytes]]:
            if failure:
                raise failure.pop()
            return await read()

        return await _through_outage(attempt, f"feed {self.topic}: XREAD")

    def take_local(self, previous_id: str, events: list[Event]) -> bool:
        """Events this process just appended, handed over without waiting for ``XREAD``.

        Taken only when they follow on from the ring's last event (``previous_id`` is the
        stream's last id before them, read in the same atomic step as the append); else
        ``XREAD`` brings them in order, with whatever other processes appended before them.
        """
        if not events or not self.follows_on(previous_id):
            return False
        self._add(events)
        return True

    def notice(self, notice: Notice) -> None:
        """Another process appended ``notice.rows``: taken when they follow on from the
        ring, ignored when the ring has them already, else held (:meth:`hold`)."""
        if self.base is None:
            self._missed = True
            return
        rows = notice.rows
        if self.follows_on(notice.previous_id):
            self._add([Event(eid, data) for eid, data in rows])
        elif parse_id(rows[-1][0]) > self.last_key:
            self.hold(notice.previous_id, [Event(eid, data) for eid, data in rows])

    def appended_here(self, previous_id: str, events: list[Event]) -> None:
        """This process's own append of ``events`` did not follow on from the ring (a notice
        of another process's append still on its way, say): held for it (:meth:`hold`),
        unless the ring has them already; read from Redis when the feed is still starting."""
        if self._node is None or not events:
            return
        if self.base is None:
            self.catch_up()  # before the start knew the ring's beginning: read after it
        elif events[-1].key > self.last_key:
            self.hold(previous_id, events)

    def hold(self, previous_id: str, events: list[Event]) -> None:
        """Keep ``events`` (appended after ``previous_id``, past the ring's end) until the
        batches between arrive, then add them in order; after ``_HOLD_SECONDS``, or with
        ``_HOLD_BATCHES`` held, read the gap from Redis instead.

        With two processes publishing to one topic, a process often reads its own append's
        reply before the notice of the other's append just before it, which Redis sent first
        on the notices connection. Reading that gap from the stream at once cost an ``XRANGE``
        through redis-py for every seventh publish (measured: ``bench/peer_nchan.py``'s flood
        with 2 processes); held, the notice read in the same or the next pass closes it.
        """
        self._held[parse_id(previous_id) if previous_id else (0, 0)] = events
        self._take_held()
        if len(self._held) > _HOLD_BATCHES:
            self._drop_held()
            self.catch_up()
        elif self._held and self._hold_timer is None:
            self._hold_timer = asyncio.get_running_loop().call_later(
                _HOLD_SECONDS, self._held_too_long
            )

    def _held_too_long(self) -> None:
        """A held batch waited ``_HOLD_SECONDS``: what comes before it was lost (a notice
        with its connection, say), so read the stream."""
        self._hold_timer = None
        if self._held:
            self._drop_held()
            self.catch_up()

    def _drop_held(self) -> None:
        self._held.clear()
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None

    def _take_held(self) -> None:
        """Add the held batches the ring now reaches, in order: a batch appended after an
        event the ring has brings what the ring lacks, which follows on from its end (an
        append is one contiguous run of the stream); one the ring has whole is dropped."""
        held = self._held
        while reached := sorted(previous for previous in held if previous <= self.last_key):
            for previous in reached:
                last = self.last_key
                rest = [event for event in held.pop(previous) if event.key > last]
                if rest:
                    self._extend(rest)
        if not held:
            self._drop_held()

    def catch_up(self) -> None:
        """Read the stream from the ring's last event on, in a task (one at a time: a gap
        found meanwhile makes it read again)."""
        if self.base is None:
            self._missed = True
            return
        if self._catching is not None and not self._catching.done():
            self._again = True
            return
        assert self._tasks is not None
        self._again = False
        try:
            self._catching = self._tasks.spawn(f"catch-up:{self.topic}", self._catch_up())
        except RuntimeError:  # shutting down
            pass

    async def _catch_up(self) -> None:
        after = format_id(self.last_key)
        while True:
            self._again = False

            async def read(after: str = f"({after}") -> list[tuple[str, bytes]]:
                return await self.store.range(self.topic, after, "+", self.read_count)

            try:
                rows = await _through_outage(read, f"feed {self.topic}: reading a gap")
            except DamagedData as exc:
                if exc.entry_id is None:
                    raise
                self._take_rows(await self._around(exc.entry_id, exc))
                after = exc.entry_id
                continue
            self._take_rows(rows)
            after = format_id(self.last_key)
            if len(rows) < self.read_count and not self._again:
                return

    async def _around(self, entry_id: str, exc: DamagedData) -> list[tuple[str, bytes]]:
        """The events before ``entry_id``, an entry another program added: the live clients
        get the changes around it (a feed stuck before it stalled them all, silently)."""
        _damage.damaged(f"topic {self.topic!r} stream entry {entry_id}", exc)
        start = f"({format_id(self.last_key)}"
        return await _through_outage(
            lambda: self.store.range(self.topic, start, f"({entry_id}", self.read_count),
            f"feed {self.topic}: reading around a damaged entry",
        )

    def follows_on(self, previous_id: str) -> bool:
        """Whether events appended after ``previous_id`` would follow on from the ring."""
        previous = parse_id(previous_id) if previous_id else (0, 0)
        return self.base is not None and previous == self.last_key

    def _add(self, fresh: list[Event]) -> None:
        """Append to the ring and wake the waiting readers now; push to the followers once
        the callbacks ready in this pass of the loop have run (:meth:`_push`). Held batches
        that follow on then are added after them."""
        self._extend(fresh)
        if self._held:
            self._take_held()

    def _extend(self, fresh: list[Event]) -> None:
        """:meth:`_add` without the held batches."""
        self._events.extend(fresh)
        self._keys.extend(e.key for e in fresh)
        overflow = len(self._events) - self.ring_events
        if overflow > 0:
            self.base = self._keys[overflow - 1]
            del self._events[:overflow]
            del self._keys[:overflow]
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            wakeups.wake(waiter, True)
        if not self._followers:
            return
        self._unpushed += fresh
        self._unpushed_batches += 1
        if not self._push_soon:
            self._push_soon = True
            loop = asyncio.get_running_loop()
            wait = self._push_after - self._clock()
            if wait < _PUSH_WAIT_MIN:
                loop.call_soon(self._push)
            else:
                self._push_timer = loop.call_later(wait, self._push)

    def _push(self) -> None:
        """Hand the events added since the last push to every follower, as one batch.

        Deferred by one pass of the loop so that the appends answered together (a batch of
        the script pipe's replies, several notices in one read) reach each client in one
        write: with 8 publishers flat out, a transport write per event and client was 62%
        of the hub's CPU (measured: py-spy of ``bench/peer_nchan.py``'s flood phase). The
        ring already holds them, so a client that catches up meanwhile reads them there,
        and its cursor drops them from the push (:meth:`ClientStream.offer`).

        And spaced under load: a push of several appends (they came faster than the
        pushes) that took ``t`` (a write per live client, ~10 us each) is followed by the
        next no sooner than ``_PUSH_SPACING * t`` later, never more than
        ``push_delay_max``, so that the fan-out takes at most a fifth of the time and
        batches grow instead. With one pass of the loop per push, 100 WebSocket clients and
        8 publishers flat out got a write per client every ~3 events, and the writes were
        most of the hub's CPU; spaced, every ~10, and its CPU per delivery fell by a third
        or more (docs/benchmark-findings.md, the spaced pushes). A push of one
        append (paced publishes, however many clients) or to a few clients never delays
        the next.
        """
        fresh, self._unpushed, self._push_soon = self._unpushed, [], False
        batches, self._unpushed_batches = self._unpushed_batches, 0
        self._push_timer = None
        if not fresh or not self._followers:
            return
        began = self._clock()
        try:
            self._fan_out(fresh)
        finally:
            if batches > 1:  # appends come faster than pushes: space the next one
                ended = self._clock()
                delay = min(self.push_delay_max, _PUSH_SPACING * (ended - began))
                self._push_after = ended + delay
            else:
                self._push_after = 0.0

    def _fan_out(self, fresh: list[Event]) -> None:
        # Direct writes are counted here, once per batch and transport: a Prometheus
        # increment per client was ~0.5 us of the ~1.8 us of Python per delivery; and
        # counted in C (list.count) after the loop, not in a dict per client.
        written = [follower.offer(fresh) for follower in list(self._followers)]
        for transport in _TRANSPORTS:
            count = written.count(transport)
            if count:
                metrics.stream_messages(transport, count)

    def follow(self, follower: Follower) -> None:
        """Push every batch read from now on to ``follower.offer`` (synchronously)."""
        self._followers.add(follower)

    def unfollow(self, follower: Follower) -> None:
        self._followers.discard(follower)

    async def read_after(
        self, cursor: EventKey, limit: int, *, timeout: float | None = None
    ) -> list[Event]:
        """Up to ``limit`` events with id > ``cursor``, waiting up to ``timeout`` for one.

        Returns ``[]`` when the timeout passes with nothing new (heartbeat time).
        """
        return (await self._read(cursor, limit, timeout, gaps=False)).events

    async def read_span(
        self, cursor: EventKey, limit: int, *, timeout: float | None = None
    ) -> Span:
        """:meth:`read_after`, also telling whether events after ``cursor`` were trimmed.

        The ring holds every event after ``base`` without a hole, so a gap can only lie
        behind it; there the read and the trimmed-through mark are taken atomically.
        """
        return await self._read(cursor, limit, timeout, gaps=True)

    async def _read(
        self, cursor: EventKey, limit: int, timeout: float | None, *, gaps: bool
    ) -> Span:
        trimmed: str | None = None
        while True:
            assert self.base is not None
            if cursor < self.base:
                try:
                    events, trimmed = await self._read_redis(cursor, limit, gaps)
                except DamagedData as exc:
                    if exc.entry_id is None:
                        raise
                    # An entry another program added: the reader (a replay, a WebSub
                    # catch-up) gets the changes around it, never it, and is not stuck.
                    _damage.damaged(f"topic {self.topic!r} stream entry {exc.entry_id}", exc)
                    end = f"({exc.entry_id}"
                    events, trimmed = await self._read_redis(cursor, limit, gaps, end)
                    if not events:
                        cursor = parse_id(exc.entry_id)
                        continue
                if events:
                    return Span(events, trimmed)
                cursor = self.base  # nothing retained in (cursor, base]: go on from the ring
                continue
            start = bisect.bisect_right(self._keys, cursor)
            if start < len(self._events):
                return Span(self._events[start : start + limit], trimmed)
            if not await self._wait(timeout):
                return Span([], trimmed)

    async def _wait(self, timeout: float | None) -> bool:
        """Wait for new events; False when ``timeout`` passed first (no task per wait:
        every delivery worker of a topic waits here once per batch; :mod:`wakeups`)."""
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.add(waiter)
        try:
            return await wakeups.wait(waiter, timeout, False)
        finally:
            self._waiters.discard(waiter)  # timed out or cancelled: not left behind

    async def _read_redis(
        self, cursor: EventKey, limit: int, gaps: bool, end: str = ""
    ) -> tuple[list[Event], str | None]:
        """Events in (cursor, base] (or up to ``end``) from Redis; with ``gaps``, also the
        last id of those retention trimmed (the ring takes over after ``base``, so never
        beyond it)."""
        assert self.base is not None
        span = (f"({format_id(cursor)}", end or format_id(self.base), min(limit, self.read_count))
        if not gaps:
            rows = await self.store.range(self.topic, *span)
            return [Event(eid, data) for eid, data in rows], None
        rows, trimmed = await self.store.range_trimmed(self.topic, *span)
        gap = None
        if trimmed is not None and parse_id(trimmed) > cursor:
            gap = format_id(min(parse_id(trimmed), self.base))
        return [Event(eid, data) for eid, data in rows], gap


class FeedHub:
    """Creates a :class:`TopicFeed` per followed topic and stops it when nobody follows."""

    def __init__(self, store: EventStore, tasks: Tasks, **feed_options: Any) -> None:
        self.store = store
        #: Where each feed's tail task runs (stopped with the hub, see hub.live.runtime).
        self.tasks = tasks
        self.feed_options = feed_options
        self._feeds: dict[str, TopicFeed] = {}
        #: Feeds being started (a notice for one is kept for it: see TopicFeed.notice).
        self._starting: dict[str, TopicFeed] = {}
        self._lock = asyncio.Lock()
        #: This process's id in the topics' tails sets.
        self.node = secrets.token_hex(8)
        self._notices = TailNotices(store.scripts, self.node)
        #: Whether feeds follow by tail notice; None until the first feed decides.
        self._by_notice: bool | None = None
        self._relisten = False
        self._listening: asyncio.Task[None] | None = None
        #: Topics this process is told of but no longer follows, being left.
        self._leaving: set[str] = set()

    @property
    def consumer_count(self) -> int:
        return sum(feed.consumers for feed in self._feeds.values())

    async def acquire(self, topic: str) -> TopicFeed:
        async with self._lock:
            feed = self._feeds.get(topic)
            if feed is None:
                if self._by_notice is None:
                    self._by_notice = await self._listen()
                feed = self._starting[topic] = TopicFeed(self.store, topic, **self.feed_options)
                try:
                    await feed.start(self.tasks, self.node if self._by_notice else None)
                finally:
                    del self._starting[topic]
                self._feeds[topic] = feed
            feed.consumers += 1
            return feed

    def acquire_nowait(self, topic: str) -> TopicFeed | None:
        """:meth:`acquire` without a wait: the topic's running feed, or None when it has
        none yet (or one is being started or stopped): then :meth:`acquire` it."""
        if self._lock.locked():
            return None
        feed = self._feeds.get(topic)
        if feed is not None:
            feed.consumers += 1
        return feed

    def release_soon(self, feed: TopicFeed) -> None:
        """:meth:`release` without a wait: at once unless the feed is to stop (then in a
        task of the feeds group)."""
        if feed.consumers > 1 and not self._lock.locked():
            feed.consumers -= 1
            return
        try:
            self.tasks.spawn(f"release:{feed.topic}", self.release(feed))
        except RuntimeError:  # shutting down: close() stops every feed
            feed.consumers -= 1

    async def release(self, feed: TopicFeed) -> None:
        async with self._lock:
            feed.consumers -= 1
            if feed.consumers <= 0:
                if self._feeds.get(feed.topic) is feed:
                    del self._feeds[feed.topic]
                await feed.stop()
                if feed.by_notice and feed.topic not in self._feeds:
                    await self._unfollow(feed.topic)

    def published(self, topic: str, appended: Appended) -> None:
        """This process appended to ``topic``: hand the events to its feed, if followed
        (:class:`hub.live.ingest.Ingest` calls this, and nothing else does)."""
        feed = self._feeds.get(topic) or self._starting.get(topic)
        if feed is None or appended.previous_id is None or not appended.ids:
            return
        # By XREAD, the read answered in the same Redis step usually brought them already:
        # then the events are not even made (measured: server CPU per delivery).
        if feed.follows_on(appended.previous_id):
            feed.take_local(appended.previous_id, appended.events)
        else:
            feed.appended_here(appended.previous_id, appended.events)

    async def end(self, topic: str) -> None:
        """The topic was deleted: stop following it and end its consumers' streams.

        Whoever acquires the topic from now on gets a fresh feed (a topic may be published
        to again after it was deleted).
        """
        async with self._lock:
            feed = self._feeds.pop(topic, None)
        if feed is not None:
            feed.ended.set()
            for stream in list(feed.streams):
                stream.stop()
            await feed.stop()

    async def close(self) -> None:
        self._notices.close()
        await cancel_and_wait([self._listening])
        for feed in list(self._feeds.values()):
            await feed.stop()
        self._feeds.clear()
        await self.tasks.stop()

    # -- tail notices (hub.store.tail_notices) ----------------------------------------

    def follow_by_xread(self) -> None:
        """Feeds started from now on follow by XREAD, as where the store has no connection
        of its own for notices (a Cluster): that path's tests."""
        self._by_notice = False

    def following(self, topic: str) -> bool:
        """Whether this process follows ``topic`` by tail notice."""
        feed = self._feeds.get(topic)
        return feed is not None and feed.by_notice

    @property
    def own_node(self) -> str:
        """What this process's appends name as their caller: its node id once its feeds
        follow by notice (it is not told of its own appends then), else ``""``."""
        return self.node if self._by_notice else ""

    def unsure(self, topic: str) -> None:
        """This process appended to ``topic`` but may not have handed what it stored to its
        feed (the append failed once it may have run, or was a replay): read the stream."""
        feed = self._feeds.get(topic) or self._starting.get(topic)
        if feed is not None and feed.by_notice:
            feed.catch_up()

    async def _listen(self) -> bool:
        """Subscribe for tail notices; False where the store cannot (feeds use XREAD)."""
        return await self._notices.open(self._noticed, self._notices_lost, _NOTICES_TIMEOUT)

    def _noticed(self, notice: Notice) -> None:
        feed = self._feeds.get(notice.topic) or self._starting.get(notice.topic)
        if feed is not None:
            feed.notice(notice)
        elif notice.topic not in self._leaving:  # followed no more: stop being told
            self._leaving.add(notice.topic)
            try:
                self.tasks.spawn(f"unfollow:{notice.topic}", self._leave(notice.topic))
            except RuntimeError:  # shutting down
                self._leaving.discard(notice.topic)

    async def _leave(self, topic: str) -> None:
        try:
            async with self._lock:
                if topic not in self._feeds and topic not in self._starting:
                    await self._unfollow(topic)
        finally:
            self._leaving.discard(topic)

    async def _unfollow(self, topic: str) -> None:
        """Leave ``topic``'s tails set (with the lock held: no feed of it starts meanwhile).
        Best effort: a follower left behind costs notices, which are ignored, not
        correctness, and the next ``_noticed`` tries again."""
        try:
            await self.store.unfollow(topic, self.node)
        except StoreError as exc:
            log.info("leaving %r's tail notices failed: %s", topic, exc)

    def _notices_lost(self, exc: Exception) -> None:
        """The notices' connection ended: every followed topic's notices since are lost,
        so listen again, follow again (the append script may have dropped this process)
        and read every feed up to date."""
        log.warning("tail notices: the connection to Redis ended (%s); subscribing again", exc)
        metrics.redis_error()
        self._relisten = True
        if self._listening is None or self._listening.done():
            try:
                self._listening = self.tasks.spawn("tail-notices", self._listen_again())
            except RuntimeError:  # shutting down
                pass

    async def _listen_again(self) -> None:
        async def subscribe() -> None:
            if not await self._listen():
                raise StoreError("tail notices: no connection of its own any more")

        while self._relisten:
            self._relisten = False
            await _through_outage(subscribe, "tail notices: subscribing")
            try:
                async with self._lock:
                    for feed in list(self._feeds.values()):
                        await self.store.follow(feed.topic, self.node)
                        feed.catch_up()
            except StoreError as exc:
                log.warning("tail notices: following again failed (%s); retrying", exc)
                self._relisten = True


class ClientStream:
    """One client's position in a topic: pulls history, then is pushed live events.

    While behind, :meth:`next` reads from the feed (ring or Redis) at the client's own
    pace. Once caught up it follows the feed, which hands every new batch to
    :meth:`offer` synchronously. With a ``writer``, a live client whose connection can
    take the batch gets it written there and then, by the feed's own fan-out loop: no task
    wakes up, no timer is armed, and all live clients share one encoded frame per batch, so
    a publish costs time per *active* client only. A batch the connection cannot take yet
    is queued (bounded by ``capacity``) for the sender task, which waits for the
    connection to drain; later batches queue behind it, so order is kept.

    Slots, and bare futures rather than events and tasks: every connected client holds one,
    idle ones included (measured: RSS per idle SSE connection).
    """

    __slots__ = (
        "_count",
        "_pending",
        "_waiter",
        "began",
        "capacity",
        "cursor",
        "feed",
        "filter",
        "last_sent",
        "live",
        "on_queue",
        "overflowed",
        "stopped",
        "transport",
        "writer",
    )

    def __init__(
        self,
        feed: TopicFeed,
        cursor: EventKey,
        capacity: int,
        event_filter: EventFilter | None = None,
        writer: Writer | None = None,
        transport: str = "",
    ) -> None:
        self.feed = feed
        #: ``ws`` or ``sse``: how the feed counts this client's direct writes.
        assert not transport or transport in _TRANSPORTS, transport
        self.transport = transport
        self.cursor = cursor
        #: Where the stream began: the resume point of a client sent nothing yet.
        self.began = cursor
        self.capacity = capacity
        self.filter = event_filter
        self.writer = writer
        self.live = False
        #: Batches for the sender task (a list: a deque's block is ~600 bytes per client).
        self._pending: list[list[Event]] = []
        self._count = 0
        #: What :meth:`next` waits on while nothing is queued.
        self._waiter: asyncio.Future[bool] | None = None
        #: Set when the client fell too far behind the live stream.
        self.overflowed = False
        #: Done when the stream must end: the client overflowed, the topic was deleted
        #: (:meth:`FeedHub.end`), or :meth:`stop` was called (the process shuts down).
        self.stopped: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        #: Id of the last event handed to the transport.
        self.last_sent: str | None = None
        #: Called when a batch is queued for the sender (or the client overflowed), for a
        #: sender that waits on many streams at once (hub.live.multiplex) rather than
        #: in :meth:`next`.
        self.on_queue: Callable[[ClientStream], None] | None = None
        feed.streams.add(self)
        if feed.ended.is_set():
            self.stop()

    def stop(self) -> None:
        if not self.stopped.done():
            self.stopped.set_result(None)

    def _wake(self) -> None:
        if self._waiter is not None:
            wakeups.wake(self._waiter, True)
        if self.on_queue is not None:
            self.on_queue(self)

    def offer(self, events: list[Event]) -> str | None:
        """Called by the feed for each new batch while the client is live; returns
        :attr:`transport` when the batch was written to the connection directly."""
        if events[0].key <= self.cursor:  # only when a client resumed from a future id
            events = [e for e in events if e.key > self.cursor]
            if not events:
                return None
        writer = self.writer
        if writer is not None and not self._pending:
            if self.filter is None:  # most clients: no call, list or lookup more than needed
                if writer(events):
                    last = events[-1]
                    self.cursor = last.key
                    self.last_sent = last.id
                    return self.transport
            else:
                shown = self._filtered(events)
                if not shown:
                    self.cursor = events[-1].key
                    return None
                if writer(shown):
                    self.cursor = events[-1].key
                    self.last_sent = shown[-1].id
                    return self.transport
        if self._count and self._count + len(events) > self.capacity:
            self.feed.unfollow(self)
            self.overflowed = True
            self.stop()
            self._wake()
            return None
        self._pending.append(events)
        self._count += len(events)
        self.cursor = events[-1].key
        self._wake()
        return None

    async def next(self, timeout: float | None) -> list[Event] | None:
        """The next events, or ``None`` when ``timeout`` passes first (heartbeat time;
        ``None``: no timeout, no timer).

        With a filter, a batch may come back empty: everything in it was filtered out.
        """
        events = await self._next(timeout)
        return self._filtered(events) if events else events

    def _filtered(self, events: list[Event]) -> list[Event]:
        if self.filter is None:
            return events
        accepts = self.filter.accepts
        return [e for e in events if accepts(e.fields)]

    def message(self, events: list[Event]) -> bytes:
        """The WebSocket message for ``events``: shared by every unfiltered client."""
        if self.filter is None:
            return self.feed.ws_message(events)
        return b"[" + b",".join(e.json(self.feed.topic) for e in events) + b"]"

    def frame(self, events: list[Event]) -> bytes:
        """:meth:`message` as a WebSocket text frame: shared by every unfiltered client."""
        if self.filter is None:
            return self.feed.ws_frame(events)
        return frames.text_frame(self.message(events))

    def sse_events(self, events: list[Event], *, chunked: bool = False) -> bytes:
        """``events`` as SSE events (``chunked``: one HTTP chunk): shared by every
        unfiltered client."""
        if self.filter is None:
            return self.feed.sse_events(events, chunked=chunked)
        text = sse.event_lines((e.id, e.json(self.feed.topic)) for e in events)
        return sse.http_chunk(text) if chunked else text

    async def _next(self, timeout: float | None) -> list[Event] | None:
        if not self.live:
            if self.cursor < self.feed.last_key:
                events = await self.feed.read_after(
                    self.cursor, min(_READ_BATCH, self.capacity), timeout=timeout
                )
                if events:
                    self.cursor = events[-1].key
                    return events
            if self.cursor >= self.feed.last_key:  # caught up: no await since the check
                self.live = True
                self.feed.follow(self)
        if not self._pending:
            waiter = self._waiter = asyncio.get_running_loop().create_future()
            try:
                await wakeups.wait(waiter, timeout, False)
            finally:
                self._waiter = None
            if not self._pending:
                return None
        if len(self._pending) == 1:
            events = self._pending.pop()
        else:
            events = [e for batch in self._pending for e in batch]
            self._pending.clear()
        self._count -= len(events)
        return events

    def go_live(self) -> None:
        """Follow the feed now: for a client that starts at its live end (nothing to read)."""
        assert self.cursor >= self.feed.last_key
        self.live = True
        self.feed.follow(self)

    def first_queued(self) -> Event | None:
        """The oldest event queued for the sender (the next after those sent), if any."""
        return self._pending[0][0] if self._pending else None

    def take_pending(self) -> list[Event]:
        """Everything queued (filtered), without a wait: for a connection that drained."""
        if not self._pending:
            return []
        events = [e for batch in self._pending for e in batch]
        self._pending.clear()
        self._count = 0
        return self._filtered(events)

    def close(self) -> None:
        if self.live:
            self.feed.unfollow(self)
        self.feed.streams.discard(self)
        # The writer is a closure over this stream and its connection: a reference cycle
        # that would keep the whole connection alive until a full GC pass.
        self.writer = None
        self.on_queue = None

    def resume_id(self) -> str:
        """The id a client that stopped resumes from without a gap: the last event handed
        to its connection, else where its stream began (:attr:`cursor` may be past events
        queued and never sent)."""
        return self.last_sent or format_id(self.began)
