"""A live client stream's life, the same whichever connection code carries it.

SSE is served on two paths: aiohttp's (:mod:`hub.web.streams`, every SSE request that is
not a plain subscribe, and WebSockets) and the lean one (:mod:`hub.web.lean_sse`, a plain
subscribe without a task per connection). What a stream does at its start and end is here,
once, so the paths cannot drift: the feed and the client's cursor, the counts (metrics,
presence), the registration that ends it at shutdown (:class:`Closing`), and why it ended.
What an SSE stream sends, from its first bytes to its last event, is
:class:`hub.core.sse_stream.SseStream`'s, for both paths too.

A stream opened with a signed read token ends when the token does (its ``exp`` plus the
leeway, :mod:`hub.core.read_tokens`): access ends when the grant ends, whatever the
transport. Its client is told so (:data:`EXPIRED`: WebSocket close code
:data:`EXPIRED_CLOSE_CODE`, SSE a last ``event: error``) and reconnects with a new token
from where it was; a WebSocket client may instead send a new token on the open stream.

A stream of a private topic ends, too, when the operator revokes the token it reads with
(:mod:`hub.core.revocations`), for every topic or for its own: :class:`Closing` keeps each
such stream's :class:`hub.core.revocations.Credential`, and :meth:`Closing.end_revoked`,
called whenever this process learns of new revocations, stops those now refused
(:data:`REVOKED`: WebSocket close code :data:`REVOKED_CLOSE_CODE`, SSE a last ``event:
error``). Streams of open topics need no token and hold none (the lean SSE path serves
only those).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from hub.core import metrics
from hub.core.access import OPEN, ReadGrant
from hub.core.events import EventFilter, EventKey, format_id
from hub.core.lag_retry import retry_after
from hub.core.presence import StreamCounts
from hub.core.revocations import Credential, Revocations
from hub.core.settings import Settings
from hub.core.sse_stream import topic_ending
from hub.core.stream_endings import DELETED, EXPIRED, REVOKED, SHUTDOWN, TOO_SLOW
from hub.core.topics import HubUrls
from hub.live.feed import ClientStream, FeedHub, TopicFeed
from hub.live.heartbeats import Heartbeats
from hub.store.event_store import EventStore

#: The WebSocket close code of :data:`EXPIRED` (4000-4999 are the application's; 4401
#: echoes the 401 the same token now gets).
EXPIRED_CLOSE_CODE = 4401
#: The WebSocket close code of :data:`REVOKED`: 4403 echoes the 403 the same token now gets
#: (as for a renewal with a token that may not read the topic).
REVOKED_CLOSE_CODE = 4403
#: A live batch is written straight to the connection while less than this is waiting in
#: its send buffer (aiohttp's own writer limit); beyond it, batches queue.
DIRECT_WRITE_LIMIT = 64 * 1024


class Closing:
    """The open streams, and the signal that ends them all at shutdown.

    Without it, a SIGTERM left streams to aiohttp's shutdown timeout, which cancelled
    their handlers: WebSocket clients saw 1006 (abnormal) after seconds, SSE clients no
    final event, and neither knew where to resume.
    """

    def __init__(self, revocations: Revocations | None = None) -> None:
        #: The revocations in force, as this process knows them (:meth:`end_revoked`).
        self.revocations = Revocations() if revocations is None else revocations
        self.started = asyncio.Event()
        self._streams: set[ClientStream] = set()
        self._none_open = asyncio.Event()
        self._none_open.set()
        #: The end of each stream whose access ends (a signed read token's), and those
        #: that reached it. Only such streams are in them: no timer for the others.
        self._grants: dict[ClientStream, asyncio.TimerHandle] = {}
        self._expired: set[ClientStream] = set()
        #: The token each stream of a private topic reads with, and those it was revoked
        #: from. Streams of open topics hold no token and are in neither.
        self._credentials: dict[ClientStream, Credential] = {}
        self._revoked: set[ClientStream] = set()

    @property
    def open(self) -> int:
        return len(self._streams)

    def opened(self, stream: ClientStream) -> None:
        self._streams.add(stream)
        self._none_open.clear()
        if self.started.is_set():
            stream.stop()

    def closed(self, stream: ClientStream) -> None:
        self._streams.discard(stream)
        timer = self._grants.pop(stream, None)
        if timer is not None:
            timer.cancel()
        self._expired.discard(stream)
        self._credentials.pop(stream, None)
        self._revoked.discard(stream)
        if not self._streams:
            self._none_open.set()

    def granted(self, stream: ClientStream, grant: ReadGrant) -> None:
        """``stream`` reads with ``grant`` (at its start, or a WebSocket client's renewal,
        which replaces the grant before): it ends when the grant's token expires or is
        revoked. A revocation this process learnt of since the token was checked ends it
        at once."""
        self.until(stream, grant.ends_at)
        credential = grant.credential
        if credential is None:
            self._credentials.pop(stream, None)
            return
        self._credentials[stream] = credential
        if self.revocations.refuses(credential, stream.feed.topic):
            self._revoke(stream)

    def end_revoked(self) -> int:
        """Stop every stream whose token is now revoked (for every topic or for its own);
        how many. Called whenever this process reads a new set of revocations."""
        if not self._credentials:
            return 0
        refuses, ended = self.revocations.refuses, 0
        for stream, credential in list(self._credentials.items()):
            if stream not in self._revoked and refuses(credential, stream.feed.topic):
                self._revoke(stream)
                ended += 1
        return ended

    def _revoke(self, stream: ClientStream) -> None:
        if not stream.stopped.done():
            self._revoked.add(stream)
            stream.stop()

    def revoked(self, stream: ClientStream) -> bool:
        """``stream`` ended because the token it read with was revoked."""
        return stream in self._revoked

    def until(self, stream: ClientStream, ends_at: float | None) -> None:
        """End ``stream`` at ``ends_at`` (epoch seconds; None: never), replacing any end
        set before (a WebSocket client's renewed token)."""
        timer = self._grants.pop(stream, None)
        if timer is not None:
            timer.cancel()
        if ends_at is None or stream.stopped.done():
            return
        delay = max(0.0, ends_at - time.time())
        self._grants[stream] = asyncio.get_running_loop().call_later(delay, self._expire, stream)

    def _expire(self, stream: ClientStream) -> None:
        self._grants.pop(stream, None)
        if not stream.stopped.done():
            self._expired.add(stream)
            stream.stop()

    def expired(self, stream: ClientStream) -> bool:
        """``stream`` ended because the access it was opened with ended."""
        return stream in self._expired

    async def close_all(self, within: float) -> None:
        """End every open stream (each with its resume point); wait up to ``within``."""
        self.started.set()
        for stream in list(self._streams):
            stream.stop()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._none_open.wait(), within)


@dataclass(frozen=True, slots=True)
class Streaming:
    """What WebSocket and SSE streams need: the live feeds, and the store for resume checks."""

    settings: Settings
    urls: HubUrls
    store: EventStore
    feeds: FeedHub
    #: The WebSockets' pings, all on one timer (:mod:`hub.live.heartbeats`).
    heartbeats: Heartbeats
    closing: Closing = field(default_factory=Closing)
    #: Live clients per topic, counted at connect and disconnect (hub.core.presence).
    presence: StreamCounts = field(default_factory=StreamCounts)


def opened(
    ctx: Streaming,
    feed: TopicFeed,
    cursor: EventKey,
    event_filter: EventFilter | None,
    transport: str,
    grant: ReadGrant = OPEN,
) -> ClientStream:
    """A client's stream on ``feed`` (acquired for it), counted and registered for shutdown;
    ``grant``: the access it was opened with (when it ends, the token a revocation names)."""
    client = ClientStream(
        feed, cursor, ctx.settings.client_buffer_events, event_filter, transport=transport
    )
    metrics.client_connected(transport)
    ctx.presence.connected(feed.topic, transport)
    ctx.closing.opened(client)
    if grant is not OPEN:  # most streams: no timer, nothing to look up
        ctx.closing.granted(client, grant)
    return client


def closed(
    ctx: Streaming, client: ClientStream, transport: str, connection: asyncio.Transport | None
) -> None:
    """The end of :func:`opened` (the caller then releases the feed)."""
    ctx.closing.closed(client)
    ctx.presence.disconnected(client.feed.topic, transport)
    metrics.client_disconnected(transport)
    client.close()
    abort_if_stuck(connection, ctx.settings.stream_close_seconds)


def abort_if_stuck(transport: asyncio.Transport | None, within: float) -> None:
    """Abort ``transport`` in ``within`` seconds if it still holds bytes its client has not
    taken.

    A stream that ended closes its connection gracefully (after a close handshake or a
    failed heartbeat, or once an SSE response is finished), and a graceful close first
    waits for the send buffer to drain: for a dropped client that stopped reading,
    forever, with the connection ESTABLISHED and its buffer held.
    """
    if transport is None:
        return

    def cut_off() -> None:
        if transport.get_write_buffer_size() > 0:
            transport.abort()

    asyncio.get_running_loop().call_later(within, cut_off)


def ending(pump: ClientStream, closing: Closing) -> str | None:
    """Why ``pump`` stopped: :data:`DELETED`, :data:`TOO_SLOW`, :data:`REVOKED`,
    :data:`EXPIRED`, :data:`SHUTDOWN`, or None (its connection ended)."""
    if pump.feed.ended.is_set():
        return DELETED
    if pump.overflowed:
        return TOO_SLOW
    if closing.revoked(pump):
        return REVOKED
    if closing.expired(pump):
        return EXPIRED
    return SHUTDOWN if closing.started.is_set() else None


def resume_point(pump: ClientStream) -> str:
    """The id a client resumes from: the last event it was sent, else where it started."""
    return pump.last_sent or format_id(pump.cursor)


def sse_ending(ended: str | None, pump: ClientStream, retry_spread: float = 0.0) -> bytes:
    """The last SSE event of ``pump``'s stream, which ended for ``ended`` (b"": none);
    ``retry_spread``: the window a too-slow client's wait is drawn from
    (``lag_retry_spread_seconds``). Its resume point is the last event its connection was
    handed, else where it began (its cursor may be past events read and never sent)."""
    if ended is None:
        return b""
    wait = retry_after(retry_spread) if ended == TOO_SLOW else 0.0
    return topic_ending(
        ended,
        topic=pump.feed.topic,
        last_sent=pump.last_sent,
        position=pump.resume_id(),
        retry_after=wait,
    )
