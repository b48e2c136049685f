"""Many topics on one connection: a stream of several topics, whatever the transport.

A client that follows thousands of topics (an aggregator of Sources) opens one WebSocket or
SSE stream for all of them (``/ws`` and ``/events`` with ``topic=`` and ``topic_prefix=``,
:mod:`hub.web.multiplex`). The hub follows each topic as it follows one for a stream of its
own, a :class:`hub.live.feed.ClientStream` on the topic's feed, and writes them all to the
one connection. What differs, and lives here:

* **One resume id for all topics** (:mod:`hub.core.stream_positions`). Every event (SSE) or
  message (WebSocket) carries the stream's composite id: a base and the positions of the
  topics sent events after it. Resuming from it resumes every topic exactly: none lost,
  none repeated. The id stays short because the base moves up to the lowest *horizon*:
  each topic's events are sent in order, the next one read says none lies between, and
  Redis says a topic's last id as of a known moment (:meth:`Multiplex._refresh`, when the id
  names many topics). A prefix stream's base never passes the last read of the topic names
  (:mod:`hub.live.topic_directory`), so a topic first published while it runs, found by the
  next read, starts at the base without missing an event; and neither does one first
  published while the client was away, when it resumes.
* **History merged in id order.** A stream that resumes (or starts ``since`` a time) reads
  every topic behind from its position, in batches, and sends the events of all of them
  merged by id (receipt time): the topics then advance together, and the id names few of
  them however many are replayed. A topic that has caught up follows its feed live: a
  batch the connection can take is written at once by the feed's fan-out, as for a stream
  of one topic; one it cannot take waits in the topic's queue for the sender task.
* **Bounded.** Topics per stream (``stream_max_topics``) and id length
  (``stream_max_id_bytes``): an event whose id would be longer waits for Redis to say where
  the topics are (the base then moves); if the id still would not fit, the stream ends
  with its resume point, and the client resumes in merged order. The queues of its topics
  share ``client_buffer_events``.

A topic deleted (``DELETE /admin/topics/{name}``) is dropped, and the stream goes on for
the others: its client is told which (:meth:`Wire.topic_deleted`), with an id that no longer
names it. A prefix stream follows a topic of that name again once it is published to anew
(the topic directory finds it as any new topic). A client following a thousand topics does
not lose its stream, and its place in all the others, for one of them.

The stream ends when any of its topics' streams would (too slow, a token that expired or was
revoked, shutdown), or when the last topic it follows is deleted, with its composite id as
the resume point; or when a prefix comes to match more topics than ``stream_max_topics``.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import orjson

from hub.core import metrics
from hub.core.access import OPEN, ReadGrant
from hub.core.events import Event, EventFilter, EventKey, format_id, parse_id
from hub.core.sse_stream import SseStream, opening_id, topic_deleted
from hub.core.stream_endings import DELETED, ID_FULL, SHUTDOWN, TOO_MANY_TOPICS
from hub.core.stream_positions import StreamPositions, before
from hub.core.topic_patterns import TopicPatterns
from hub.live import wakeups
from hub.live.client_streams import Streaming, ending
from hub.live.feed import ClientStream, TopicFeed
from hub.live.topic_directory import Snapshot, TopicDirectory
from hub.store.redis_connection import StoreError

log = logging.getLogger(__name__)

#: The id names this many topics before the stream asks Redis where they are (at most once
#: per :data:`_REFRESH_SECONDS`, unless an id would not fit).
_LISTED_SOFT = 32
_REFRESH_SECONDS = 1.0
#: ... and sooner, every :data:`_REFRESH_SOON` seconds, once it names this many (a burst
#: across many topics: each event of it would carry a long id).
_LISTED_MANY = 128
_REFRESH_SOON = 0.05
#: A refresh that took ``t`` is followed by ``_REFRESH_SPACING * t`` of sending first.
_REFRESH_SPACING = 4.0
#: Events read per topic and step while catching up, and sent per write.
_READ_BATCH = 200
_WRITE_BATCH = 500
#: Topics read from at once while catching up (each read may be an XRANGE).
_READS_AT_ONCE = 16
#: The smallest queue of one topic (they share ``client_buffer_events``), and the fewest
#: events of its history read at a time.
_MIN_QUEUE = 100
_MIN_READ = 10


@dataclass(frozen=True, slots=True)
class Wire:
    """How events go on the connection: ``sse`` (an event per change, each with the id) or
    a WebSocket's JSON message ``{"id": ..., "events": [...]}`` per batch."""

    sse: bool

    def opening(self, resume_id: str) -> bytes:
        """What the client is told first: where it starts, as an id (so that even a stream
        that ends before its first event resumes exactly)."""
        if self.sse:
            return opening_id(resume_id)
        return b'{"id":"%s","events":[]}' % resume_id.encode()

    def topic_deleted(self, topic: str, resume_id: str) -> bytes:
        """``topic`` was deleted and the stream goes on without it: SSE ``event:
        topic-deleted`` (``data: {"topic": NAME}``, ``id:`` the id without it), WebSocket
        ``{"id": ..., "events": [], "topic_deleted": NAME}``."""
        if self.sse:
            return topic_deleted(topic, resume_id)
        return orjson.dumps({"id": resume_id, "events": [], "topic_deleted": topic})


class Multiplex:
    """One client's stream of several topics (see the module docstring).

    The web layer opens it (:meth:`open`), gives it the connection's direct write
    (:attr:`can_write`, :attr:`write_now`), runs :meth:`run` with the connection's awaited
    write until :attr:`stopped`, then :meth:`close`\\ s it.
    """

    def __init__(
        self,
        ctx: Streaming,
        *,
        patterns: TopicPatterns,
        wire: Wire,
        transport: str,
        grant_of: Callable[[str], ReadGrant | None],
        event_filter: EventFilter | None = None,
        directory: TopicDirectory | None = None,
    ) -> None:
        self.ctx = ctx
        self.settings = ctx.settings
        self.patterns = patterns
        self.wire = wire
        self.transport = transport
        #: The grant a topic is read with, None for one the client may not read (skipped).
        self.grant_of = grant_of
        self.filter = event_filter
        self.directory = directory if patterns.prefixes else None
        self.positions = StreamPositions((0, 0))
        self.subs: dict[str, ClientStream] = {}
        self.max_id_bytes = ctx.settings.stream_max_id_bytes
        #: Events one topic may have queued (they share ``client_buffer_events``), and read
        #: ahead while catching up (all topics' batches together within it too).
        self.capacity = ctx.settings.client_buffer_events
        self.read_batch = _READ_BATCH
        #: Topics whose next events are to be read (catching up), and those read: a batch
        #: and where its unsent events start, by topic, and a heap of their next ids.
        self._behind: set[str] = set()
        self._buffers: dict[str, tuple[list[Event], int]] = {}
        self._heap: list[tuple[EventKey, str]] = []
        #: Live topics with batches queued, and batches taken from their queues unsent.
        self._ready: dict[str, None] = {}
        self._held: dict[str, list[Event]] = {}
        #: Names the topic directory found that the stream does not follow yet, the
        #: position the base may move to once it does, and names it may not read.
        self._found: set[str] = set()
        self._found_after: EventKey | None = None
        self._unreadable: set[str] = set()
        #: Topics deleted while followed, whose client is yet to be told; and, for a prefix
        #: stream, each deleted name with the topic names last looked at that still held it
        #: (the directory's names move only when a name is added: a name read again is
        #: followed again only if the topic exists anew).
        self._deleted: list[str] = []
        self._gone: dict[str, frozenset[str]] = {}
        self._names_seen: frozenset[str] = frozenset()
        #: How far the base may move: every topic with an event up to it is followed
        #: (None: no bound, a stream of named topics only).
        self._floor: EventKey | None = None
        self._advance_at = _LISTED_SOFT
        self._refreshed = 0.0
        self._refresh_after = 0.0
        self._refresh_wanted = False
        #: Topics that caught up since the last look at where they are (:meth:`_settle`).
        self._settling: set[str] = set()
        self._waiter: asyncio.Future[None] | None = None
        self.stopped: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        #: The topic stream that ended this one, or its own reason.
        self.stopped_by: ClientStream | None = None
        self.reason: str | None = None
        #: The connection's direct write: whether it takes bytes now, and the write.
        self.can_write: Callable[[], bool] | None = None
        self.write_now: Callable[[bytes], None] | None = None
        self._opened = False

    # -- opening and closing --------------------------------------------------------------

    async def open(
        self,
        names: Iterable[str],
        start: StreamPositions | None,
        snapshot: Snapshot | None = None,
    ) -> None:
        """Follow ``names`` from ``start`` (None: from their current end); ``snapshot``:
        the topic names read for a prefix (the base may move up to its position)."""
        feeds: list[tuple[str, TopicFeed]] = []
        try:
            for name in sorted(set(names)):
                feeds.append((name, await self.ctx.feeds.acquire(name)))
        except BaseException:
            for _name, feed in feeds:
                await self.ctx.feeds.release(feed)
            raise
        if start is None:
            base = max((feed.last_key for _name, feed in feeds), default=(0, 0))
            start = StreamPositions(base)
        self.positions = start
        self._share(len(feeds))
        metrics.client_connected(self.transport)
        self._opened = True
        for name, feed in feeds:
            self._follow(name, feed)
        self.positions.forget_others()
        if self.directory is not None:
            self._floor = snapshot.after if snapshot is not None else (0, 0)
            self.directory.watch(self._snapshot)

    def _share(self, topics: int) -> None:
        """Split ``client_buffer_events`` among ``topics``: each one's queue, and how much of
        its history is read ahead at a time (a thousand topics catching up hold at most
        that many events in memory, not a thousand batches)."""
        share = self.settings.client_buffer_events // max(1, topics)
        self.capacity = max(_MIN_QUEUE, share)
        self.read_batch = max(_MIN_READ, min(_READ_BATCH, share))

    def _follow(self, topic: str, feed: TopicFeed) -> None:
        grant = self.grant_of(topic) or OPEN
        sub = ClientStream(
            feed, self.positions.follow(topic), self.capacity, transport=self.transport
        )
        self.subs[topic] = sub
        ctx = self.ctx
        ctx.presence.connected(topic, self.transport)
        ctx.closing.opened(sub)
        if grant is not OPEN:
            ctx.closing.granted(sub, grant)

        def write(events: list[Event], topic: str = topic) -> bool:
            return self._write_live(topic, events)

        sub.writer = write
        sub.on_queue = self._queued
        sub.stopped.add_done_callback(functools.partial(self._sub_stopped, sub))
        self._behind.add(topic)

    async def close(self) -> None:
        """Stop following every topic (after :meth:`open`, whatever happened since)."""
        if self.directory is not None:
            self.directory.unwatch(self._snapshot)
        self._wake()
        subs, self.subs = self.subs, {}
        ctx = self.ctx
        for topic, sub in subs.items():
            ctx.closing.closed(sub)
            ctx.presence.disconnected(topic, self.transport)
            sub.close()
        if self._opened:
            metrics.client_disconnected(self.transport)
        for sub in subs.values():
            ctx.feeds.release_soon(sub.feed)

    # -- ending -----------------------------------------------------------------------

    def stop(self, reason: str | None = None) -> None:
        if not self.stopped.done():
            self.reason = reason
            self.stopped.set_result(None)
        self._wake()

    def _sub_stopped(self, sub: ClientStream, _done: object = None) -> None:
        if not self.stopped.done():
            topic = sub.feed.topic
            deleted = sub.feed.ended.is_set() and self.subs.get(topic) is sub
            if deleted and len(self.subs) > 1:
                self._drop(topic, sub)  # the others go on
            else:
                if deleted:  # the last one: the stream ends, its id without it
                    self.positions.drop(topic)
                self.stopped_by = sub
                self.stopped.set_result(None)
        self._wake()

    def _drop(self, topic: str, sub: ClientStream) -> None:
        """Stop following ``topic``, deleted (its feed ended): forget what of it was read or
        queued and unsent (its events are gone with it), take it out of the id, and have the
        sender tell the client."""
        del self.subs[topic]
        self._behind.discard(topic)
        if self._buffers.pop(topic, None) is not None:
            self._heap = [entry for entry in self._heap if entry[1] != topic]
            heapq.heapify(self._heap)
        self._ready.pop(topic, None)
        self._held.pop(topic, None)
        self._settling.discard(topic)
        self.positions.drop(topic)
        ctx = self.ctx
        ctx.closing.closed(sub)
        ctx.presence.disconnected(topic, self.transport)
        sub.close()
        ctx.feeds.release_soon(sub.feed)
        if self.directory is not None:
            self._gone[topic] = self._names_seen
        self._deleted.append(topic)

    def ending(self) -> str | None:
        """Why the stream ended: a reason of :func:`hub.live.client_streams.ending`, its own
        (:data:`hub.core.stream_endings.TOO_MANY_TOPICS`, ``ID_FULL``), or None (its
        connection ended)."""
        if self.reason is not None:
            return self.reason
        if self.stopped_by is not None:
            return ending(self.stopped_by, self.ctx.closing)
        return SHUTDOWN if self.ctx.closing.started.is_set() else None

    def deleted_topic(self) -> str | None:
        """The deleted topic that ended the stream, if one did."""
        sub = self.stopped_by
        return sub.feed.topic if sub is not None and self.ending() == DELETED else None

    @property
    def resume_id(self) -> str:
        """The id of everything sent so far."""
        return self.positions.encode()

    # -- sending ----------------------------------------------------------------------

    def _queued(self, sub: ClientStream) -> None:
        if not sub.overflowed:
            self._ready[sub.feed.topic] = None
        self._wake()

    def _write_live(self, topic: str, events: list[Event]) -> bool:
        """A live batch from the topic's feed: written now when the connection takes it and
        nothing of the topic waits before it; else False (queued for :meth:`run`)."""
        can_write, write_now = self.can_write, self.write_now
        if topic in self._held or can_write is None or write_now is None or not can_write():
            return False
        payload = self._encode([(topic, events)])
        if payload is None:  # its id would not fit: the sender asks Redis first
            self._refresh_wanted = True
            return False
        if payload:
            write_now(payload)
        if len(self.positions) >= _LISTED_SOFT:
            self._wake()  # the sender may ask Redis where the topics are
        return True

    def _encode(
        self, runs: list[tuple[str, list[Event]]], bases: list[EventKey | None] | None = None
    ) -> bytes | None:
        """``runs`` (each a topic's events in order) as bytes for the wire, the positions
        moved past them; None, with nothing moved, when an id would exceed
        ``stream_max_id_bytes``. ``bases``: how far the base may move after each run (a
        merge of history knows: up to just before the next event of any topic)."""
        positions = self.positions
        if len(positions) >= self._advance_at:
            self._advance()
            self._advance_at = max(_LISTED_SOFT, 2 * len(positions))
        undo: dict[str, tuple[EventKey, EventKey]] = {}
        saved = None if bases is None else positions.state()
        accepts = None if self.filter is None else self.filter.accepts
        sse, limit = self.wire.sse, self.max_id_bytes
        parts: list[bytes] = []
        for index, (topic, events) in enumerate(runs):
            if topic not in undo:
                undo[topic] = (positions.position(topic), positions.horizon(topic))
            for event in events:
                positions.sent(topic, event.key)
                if accepts is not None and not accepts(event.fields):
                    continue
                if sse:
                    resume_id = positions.encode()
                    if len(resume_id) > limit:
                        self._undo(undo, saved)
                        return None
                    parts.append(b"id: %s\ndata: %s\n\n" % (resume_id.encode(), event.json(topic)))
                else:
                    parts.append(event.json(topic))
            base = None if bases is None else bases[index]
            if base is not None:
                positions.raise_base(base)
        if sse or not parts:
            return b"".join(parts)
        resume_id = positions.encode()
        if len(resume_id) > limit:
            self._undo(undo, saved)
            return None
        return b'{"id":"%s","events":[%s]}' % (resume_id.encode(), b",".join(parts))

    def _undo(
        self,
        undo: dict[str, tuple[EventKey, EventKey]],
        saved: tuple[EventKey, dict[str, EventKey], dict[str, EventKey]] | None,
    ) -> None:
        if saved is not None:
            self.positions.restore(saved)
            return
        for topic, (position, horizon) in undo.items():
            self.positions.undo(topic, position, horizon)

    def _advance(self) -> bool:
        return self.positions.advance(self._floor)

    async def run(
        self, send: Callable[[bytes], Awaitable[None]], stream: SseStream | None = None
    ) -> None:
        """Send until the stream stops: history merged in id order, queued live batches,
        heartbeats, and what the topic directory finds. ``stream``: an SSE stream's core,
        which frames what is sent and says when a heartbeat is due; a WebSocket has none
        (aiohttp pings it)."""
        loop = asyncio.get_running_loop()

        async def put(payload: bytes) -> None:
            data = payload if stream is None else stream.events(payload, loop.time())
            if data:
                await send(data)

        await put(self.wire.opening(self.resume_id))
        while not self.stopped.done():
            if self._deleted:
                topic = self._deleted.pop(0)
                await put(self.wire.topic_deleted(topic, self.resume_id))
                continue
            if self._found:
                await self._follow_found()
                continue
            if self._behind:
                await self._read_behind()
                continue
            if self._refresh_due():
                await self._refresh()
            elif self._settling and len(self.positions) > _LISTED_SOFT:
                await self._settle()
            if self._ready or self._held or self._heap:
                payload = await self._next_payload()
                if payload is None:
                    return
                if payload:
                    await put(payload)
                    metrics.stream_messages(self.transport)
                continue
            await self._wait(None if stream is None else stream.heartbeat_in(loop.time()))
            beat = b"" if stream is None else stream.heartbeat(loop.time())
            if beat:
                await send(beat)

    async def _next_payload(self) -> bytes | None:
        """The next bytes to send (b"" when everything was filtered out); None when an id
        would not fit even after asking Redis (the stream is stopped then)."""
        for attempt in range(2):
            payload = self._take()
            if payload is not None:
                return payload
            if attempt == 0:
                await self._refresh()
        self.stop(ID_FULL)
        return None

    def _take(self) -> bytes | None:
        """Queued live batches if any, else the next events of the merged history."""
        if len(self.positions) > _LISTED_SOFT:
            self._advance()  # O(topics), once per write: catching up moves the base on
        for topic in list(self._ready):
            sub = self.subs.get(topic)
            if sub is not None:
                events = sub.take_pending()
                if events:
                    self._held.setdefault(topic, []).extend(events)
        self._ready.clear()
        if self._held:
            runs = list(self._held.items())
            payload = self._encode(runs)
            if payload is not None:
                self._held.clear()
            return payload
        heap, buffers = list(self._heap), dict(self._buffers)
        # Every topic not catching up is known through its horizon at least; those catching
        # up, through just before their next event; so after each run of the merge the base
        # may move up to the lowest of those (no O(topics) look per run).
        settled = self.positions.lowest_horizon(t for t in self.subs if t not in buffers)
        runs, drained, nexts = self._merge()
        bases: list[EventKey | None] = []
        for (topic, events), following in zip(runs, nexts, strict=True):
            candidates = [k for k in (settled, self._floor) if k is not None]
            if following is not None:
                candidates.append(before(following))
            if topic in drained:  # nothing more read of it: known only as far as sent
                candidates.append(events[-1].key)
            bases.append(min(candidates) if candidates else None)
        payload = self._encode(runs, bases)
        if payload is None:
            self._heap, self._buffers = heap, buffers
        else:
            self._behind.update(drained)
        return payload

    def _merge(
        self,
    ) -> tuple[list[tuple[str, list[Event]]], list[str], list[EventKey | None]]:
        """The next events of the topics catching up, in id order: each topic's run up to
        the next id of another; stops at a topic with nothing more read (it is read before
        the merge goes on). Also, after each run, the next id of any topic catching up (None:
        none has more read)."""
        runs: list[tuple[str, list[Event]]] = []
        drained: list[str] = []
        nexts: list[EventKey | None] = []
        heap, count = self._heap, 0
        while heap and count < _WRITE_BATCH:
            _key, topic = heapq.heappop(heap)
            events, at = self._buffers[topic]
            limit = heap[0][0] if heap else None
            end = at + 1
            while end < len(events) and count + end - at < _WRITE_BATCH:
                if limit is not None and events[end].key > limit:
                    break
                end += 1
            runs.append((topic, events[at:end]))
            count += end - at
            if end < len(events):
                self._buffers[topic] = (events, end)
                heapq.heappush(heap, (events[end].key, topic))
                nexts.append(heap[0][0])
            else:
                del self._buffers[topic]
                drained.append(topic)
                nexts.append(heap[0][0] if heap else None)
                break
        return runs, drained, nexts

    async def _read_behind(self) -> None:
        """Read the next batch of the topics catching up (a few at once); a topic with
        nothing more follows its feed live from there."""
        topics = sorted(self._behind)[:_READS_AT_ONCE]
        self._behind.difference_update(topics)
        await asyncio.gather(*(self._read(topic) for topic in topics))

    async def _read(self, topic: str) -> None:
        sub = self.subs.get(topic)
        if sub is None or sub.stopped.done():
            return
        feed = sub.feed
        ring = feed.base  # where the ring starts as the read begins (it moves up as it fills)
        events = await feed.read_after(sub.cursor, self.read_batch, timeout=0)
        if self.subs.get(topic) is not sub or sub.stopped.done():
            return
        if events:
            sub.cursor = events[-1].key
            self.positions.known_through(topic, before(events[0].key))
            self._buffers[topic] = (events, 0)
            heapq.heappush(self._heap, (events[0].key, topic))
            return
        if ring is not None and sub.cursor < ring:
            # Nothing is retained between the cursor and the ring (the read found nothing
            # there): go on from the ring, as the read itself did.
            sub.cursor = ring
            self.positions.known_through(topic, ring)
        if sub.cursor >= feed.last_key:
            sub.go_live()  # its feed hands it every later batch (no await since the check)
            # Known only as far as sent, it would hold the base back while others catch
            # up: Redis says where it is (no later event: through the time it says so).
            self._settling.add(topic)
        else:
            self._behind.add(topic)  # more arrived meanwhile

    async def _wait(self, timeout: float | None) -> None:
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            await wakeups.wait(waiter, timeout, None)
        finally:
            self._waiter = None

    def _wake(self) -> None:
        if self._waiter is not None:
            wakeups.wake(self._waiter, None)

    # -- where the topics are: Redis, and the topic directory ----------------------------

    def _refresh_due(self) -> bool:
        now = time.monotonic()
        if now < self._refresh_after:
            return False
        if self._refresh_wanted:
            return True
        listed = len(self.positions)
        if listed <= _LISTED_SOFT:
            return False
        since = now - self._refreshed
        return since >= _REFRESH_SECONDS or (listed > _LISTED_MANY and since >= _REFRESH_SOON)

    async def _refresh(self) -> None:
        """Ask Redis where every followed topic is, so the base moves up to the oldest event
        the client has yet to be sent (:meth:`_read_horizons`); a prefix stream reads the
        topic names first (its base may pass no further than where it knows every topic).
        Its callers space refreshes (:meth:`_refresh_due`), but for an id that would not fit."""
        self._refresh_wanted = False
        self._settling.clear()
        began = time.monotonic()
        try:
            if self.directory is not None:
                self._snapshot(await self.directory.read())
                if self._found:
                    await self._follow_found()
            await self._read_horizons(list(self.subs))
        except StoreError as exc:  # Redis is out: the id stays as long as it is
            metrics.redis_error()
            log.info("stream of %d topics: reading where they are failed: %s", len(self.subs), exc)
        finally:
            ended = time.monotonic()
            self._refreshed = ended
            # At most a fifth of the stream's time goes to asking: a refresh that takes t
            # (a thousand topics on a busy Redis: tens of ms) is followed by sends for 4 t.
            self._refresh_after = ended + max(_REFRESH_SOON, _REFRESH_SPACING * (ended - began))
        self._advance()
        self._advance_at = max(_LISTED_SOFT, 2 * len(self.positions))

    async def _settle(self) -> None:
        """Ask Redis where the topics that caught up since the last look are: while others
        catch up, each would hold the base at its last event sent (a few topics: cheap,
        unlike :meth:`_refresh`)."""
        topics = [topic for topic in self._settling if topic in self.subs]
        self._settling.clear()
        try:
            await self._read_horizons(topics)
        except StoreError as exc:
            metrics.redis_error()
            log.info("stream of %d topics: reading where they are failed: %s", len(self.subs), exc)

    async def _read_horizons(self, topics: list[str]) -> None:
        """Raise the horizons of ``topics`` from Redis: a position every later event comes
        after, then each topic's last id. A topic whose last id was sent is known through
        that position; one with events unsent is known up to the first of them (queued
        here, or else read from its stream)."""
        store = self.ctx.store
        after = await store.new_ids_after()
        facts = await store.facts_of(topics)
        unsent: list[str] = []
        for topic, fact in zip(topics, facts, strict=True):
            if fact is not None and topic in self.subs:  # else: damaged meta, left
                last = parse_id(fact.last_id) if fact.last_id else (0, 0)
                if not self._known_to_next(topic, last, after):
                    unsent.append(topic)
        for start in range(0, len(unsent), _READS_AT_ONCE):
            group = unsent[start : start + _READS_AT_ONCE]
            await asyncio.gather(*(self._known_to_stream(topic) for topic in group))

    def _known_to_next(self, topic: str, last: EventKey, after: EventKey) -> bool:
        """Raise ``topic``'s horizon from what is known here: to ``after`` when its last id
        ``last`` was sent, else to just before its first event queued or read; False when
        it has events unsent that only its stream knows."""
        positions = self.positions
        if last <= positions.position(topic):
            positions.known_through(topic, after)
            return True
        held = self._held.get(topic)
        sub = self.subs[topic]
        first = held[0] if held else sub.first_queued()
        if first is None and topic in self._buffers:
            events, at = self._buffers[topic]
            first = events[at]
        if first is None:
            return False
        positions.known_through(topic, before(first.key))
        return True

    async def _known_to_stream(self, topic: str) -> None:
        """Raise ``topic``'s horizon to just before the first event after its position, as
        its stream holds them."""
        position = self.positions.position(topic)
        rows = await self.ctx.store.range(topic, f"({format_id(position)}", "+", 1)
        if rows and topic in self.subs:
            self.positions.known_through(topic, before(parse_id(rows[0][0])))

    def _snapshot(self, snapshot: Snapshot) -> None:
        """The topic directory's names: new ones under the prefixes are followed by the
        sender; the base may then move up to the snapshot's position."""
        self._names_seen = snapshot.names
        new = {
            name
            for name in snapshot.names
            if name not in self.subs
            and name not in self._unreadable
            and self._gone.get(name) is not snapshot.names
            and self.patterns.matches(name)
        }
        if new:
            self._found |= new
            if self._found_after is None or snapshot.after > self._found_after:
                self._found_after = snapshot.after
            self._wake()
        elif not self._found and (self._floor is None or snapshot.after > self._floor):
            self._floor = snapshot.after

    async def _follow_found(self) -> None:
        found, self._found = sorted(self._found), set()
        after, self._found_after = self._found_after, None
        limit = self.settings.stream_max_topics
        again = [name for name in found if name in self._gone]
        if again:  # deleted while followed: only a topic that exists anew is followed
            facts = await self.ctx.store.facts_of(again)
            for name, fact in zip(again, facts, strict=True):
                if fact is not None and fact.last_id:
                    del self._gone[name]
                else:  # names read before the delete: looked at again once they move
                    self._gone[name] = self._names_seen
            found = [name for name in found if name not in self._gone]
        for name in found:
            if self.stopped.done():
                return
            if name in self.subs:
                continue
            if self.grant_of(name) is None:
                self._unreadable.add(name)  # a private topic this client may not read
                continue
            if len(self.subs) >= limit:
                self.stop(TOO_MANY_TOPICS)
                return
            feed = await self.ctx.feeds.acquire(name)
            if self.stopped.done() or name in self.subs:
                self.ctx.feeds.release_soon(feed)
                return
            self._share(len(self.subs) + 1)
            self._follow(name, feed)
        if after is not None and not self._found and (self._floor is None or after > self._floor):
            self._floor = after
