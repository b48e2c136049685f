"""One server-sent-events response as plain data in and bytes out: no I/O, no clock.

The hub serves SSE on two paths: aiohttp's (:mod:`hub.web.streams` for a topic,
:mod:`hub.web.multiplex` for several) and the lean one (:mod:`hub.web.lean_sse`, a plain
subscribe without aiohttp's per-request machinery). What a stream sends is decided here,
once, so that the paths cannot drift (``tests/hub/test_lean_differential.py`` compares
their bytes): the response head, where a client resumes from, the first bytes of the body,
events framed for the connection, heartbeats when they are due, and the last event that
says why a stream ended and where to resume, after which nothing more is sent. The
drivers do the I/O around it, as the ``websockets`` library's connections do around its
frames: they read events from the feed, hand them here with the time, and write what comes
back.

Not here: the live fan-out's encoding of a batch, made once for every client of a topic
and written by the feed's own loop straight to each connection that can take it
(:mod:`hub.core.sse`, ``TopicFeed.sse_events``: per client and publish, measured); the
bound on a client's queue, which ends a too-slow client of either transport
(``ClientStream.offer``; what such a client is told last is here). A stream of several
topics is driven by its sender (``hub.live.multiplex.Multiplex.run``), which hands what it
sends to its :class:`SseStream` and asks it when a heartbeat is due.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from hub.core.settings import Settings
from hub.core.sse import http_chunk
from hub.core.stream_endings import (
    DELETED,
    EXPIRED,
    REVOKED,
    SHUTDOWN,
    TOO_MANY_TOPICS,
    TOO_SLOW,
)
from rsclient.backoff import retry_hint

#: An SSE response's own headers (the head adds Date, Server, the framing and the request
#: id: aiohttp's writer on its path, :func:`response_head` on the lean one, byte for byte).
SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
#: The first bytes of every SSE body: a client reconnects after a second.
SSE_RETRY = b"retry: 1000\n\n"
#: What an idle SSE stream is sent every ``heartbeat_seconds``: a comment, which clients
#: ignore, so that proxies and the client's own read timeout see the stream alive.
SSE_HEARTBEAT = b": heartbeat\n\n"
#: The ``retry:`` of an SSE ``shutdown`` event: reconnect (elsewhere) almost at once.
SHUTDOWN_RETRY_MS = 100
#: The end of a chunked body (RFC 9112 §7.1).
LAST_CHUNK = b"0\r\n\r\n"
#: What ends a line in an event stream (WHATWG HTML, "Server-sent events").
_LINE_END = re.compile(r"\r\n|\r|\n")
#: What a client without a last event is told to resume from.

_HEAD_START = (
    "HTTP/1.1 200 OK\r\n"
    + "".join(f"{name}: {value}\r\n" for name, value in SSE_HEADERS.items())
    + "Transfer-Encoding: chunked\r\nDate: "
)


def response_head(*, date: str, server: str, request_id_header: str, request_id: str) -> bytes:
    """The head of a chunked HTTP/1.1 SSE response, as aiohttp writes it for the same
    headers (``date`` in RFC 822 form, ``server`` the Server header's value)."""
    return (
        f"{_HEAD_START}{date}\r\nServer: {server}\r\n{request_id_header}: {request_id}\r\n\r\n"
    ).encode()


def resume_from(last_event_id: str | None, since: str | None) -> tuple[str, str] | None:
    """The resume point a request names, and what named it; ``Last-Event-ID`` wins, as an
    SSE client reconnecting to the same URL (``?since=`` included) sends it with the newer
    position. Empty values name nothing."""
    if last_event_id:
        return last_event_id, "Last-Event-ID"
    return (since, "since") if since else None


def opening_id(resume_id: str) -> bytes:
    """An ``id:`` alone: where a stream starts, so that even one that ends before its first
    event resumes exactly (streams of several topics send it first)."""
    return b"id: %s\n\n" % resume_id.encode()


def last_event(
    kind: str, data: str, *, event_id: str | None = None, retry: int | None = None
) -> bytes:
    """An event of type ``kind``: what a stream sends last. Each line of ``data`` is a
    ``data:`` line of its own, so that no text can end the event early or add a field."""
    lines = [f"event: {kind}\n"]
    if retry is not None:
        lines.append(f"retry: {retry}\n")
    if event_id is not None:
        lines.append(f"id: {event_id}\n")
    lines.extend(f"data: {line}\n" for line in _LINE_END.split(data))
    lines.append("\n")
    return "".join(lines).encode()


def _shutdown(resume_id: str) -> bytes:
    """Reconnect at once (to another process), from this id."""
    return last_event(
        "shutdown",
        f"shutdown; resume with Last-Event-ID: {resume_id}",
        event_id=resume_id,
        retry=SHUTDOWN_RETRY_MS,
    )


def topic_ending(
    ended: str | None,
    *,
    topic: str,
    last_sent: str | None,
    position: str,
    retry_after: float = 0.0,
) -> bytes:
    """What a stream of one topic tells its client last (b"": nothing, its connection
    just ended). ``last_sent``: the id of the last event it was sent; ``position``: where it
    started, the resume point when it was sent nothing; ``retry_after``: for a client
    dropped as too slow, the wait drawn for it (:func:`hub.core.lag_retry.retry_after`).

    A too-slow client is told, as a WebSocket one is in its close reason, where to resume
    and when: in ``data:`` (:func:`rsclient.backoff.retry_hint`'s words, which the hub's
    own clients read), and as the fields a browser's EventSource acts on by itself, ``id:``
    (its next ``Last-Event-ID``) and ``retry:`` (its wait), so that the clients one publish
    storm drops come back spread over the window, from where each stopped."""
    resume = last_sent or position
    if ended == SHUTDOWN:
        return _shutdown(resume)
    if ended == DELETED:
        return last_event("deleted", topic)
    if ended == TOO_SLOW:
        return last_event(
            "error",
            f"too slow; resume with Last-Event-ID: {resume}; {retry_hint(retry_after)}",
            event_id=resume,
            retry=round(max(retry_after, 0.0) * 1000),
        )
    if ended in (EXPIRED, REVOKED):
        return last_event("error", f"{ended} and resume with Last-Event-ID: {resume}")
    return b""


#: The SSE event type that tells a stream of several topics' client one of them was deleted
#: (the stream goes on for the others).
TOPIC_DELETED_EVENT = "topic-deleted"


def topic_deleted(topic: str, resume_id: str) -> bytes:
    """A stream of several topics goes on without ``topic``, which was deleted: its client
    is told so, with the stream's id that no longer names it (``data:`` is JSON,
    ``{"topic": NAME}``)."""
    data = json.dumps({"topic": topic}, ensure_ascii=False, separators=(",", ":"))
    return last_event(TOPIC_DELETED_EVENT, data, event_id=resume_id)


def topics_ending(
    ended: str | None, *, resume_id: str, message: str, retry_after: float = 0.0
) -> bytes:
    """What a stream of several topics tells its client last (b"": nothing): ``message``
    says why (the web layer's words for ``ended``), then, but for
    :data:`TOO_MANY_TOPICS` (the same stream would end again), its composite id to resume
    from, as the event's ``id:`` too; a client dropped as too slow is also told its wait
    (``retry_after``), in words and as ``retry:``, as a stream of one topic's is."""
    if ended is None:
        return b""
    if ended == SHUTDOWN:
        return _shutdown(resume_id)
    if ended == TOO_MANY_TOPICS:
        return last_event("error", message)
    if ended == TOO_SLOW:
        return last_event(
            "error",
            f"{message}; resume with Last-Event-ID: {resume_id}; {retry_hint(retry_after)}",
            event_id=resume_id,
            retry=round(max(retry_after, 0.0) * 1000),
        )
    return last_event(
        "deleted" if ended == DELETED else "error",
        f"{message}; resume with Last-Event-ID: {resume_id}",
        event_id=resume_id,
    )


@dataclass(frozen=True, slots=True)
class SseTerms:
    """What every stream of a driver shares: made once (per app on the lean path), so that
    a stream holds only its own state."""

    #: Whether what a stream returns must be framed as HTTP/1.1 chunks: the lean path writes
    #: to the socket itself; aiohttp's path frames what it is given, so it passes False.
    chunked: bool
    #: An idle stream is sent :data:`SSE_HEARTBEAT` this often (``heartbeat_seconds``).
    heartbeat_seconds: float
    #: How long a client gets to take a stream's last bytes (``stream_close_seconds``) ...
    close_seconds: float
    #: ... at most this long at shutdown (``shutdown_streams_seconds``).
    shutdown_close_seconds: float

    @classmethod
    def of(cls, settings: Settings, *, chunked: bool) -> SseTerms:
        return cls(
            chunked=chunked,
            heartbeat_seconds=settings.heartbeat_seconds,
            close_seconds=settings.stream_close_seconds,
            shutdown_close_seconds=settings.shutdown_streams_seconds,
        )


class SseStream:
    """One SSE response body, from its first bytes to its last.

    Times are the driver's clock (the event loop's), in seconds. Once :meth:`end` was
    called, nothing more is sent: a client is never sent an event behind the resume point
    its last event named.

    A driver may hold one or be one: the lean path's stream subclasses it, as one object
    per idle connection (measured: a separate object was +0.25 KiB of RSS per idle lean
    stream, 8%), hence the two-underscore slots, which no subclass's names can shadow.
    """

    __slots__ = ("__done", "__due", "__terms")

    def __init__(self, terms: SseTerms, now: float) -> None:
        self.__terms = terms
        #: When the next heartbeat is due: one interval after the last bytes sent.
        self.__due = now + terms.heartbeat_seconds
        self.__done = False

    @property
    def ended(self) -> bool:
        return self.__done

    def __framed(self, payload: bytes) -> bytes:
        # An empty chunk would end a chunked body: nothing is sent for nothing.
        if not payload or self.__done:
            return b""
        return http_chunk(payload) if self.__terms.chunked else payload

    def opening(self) -> bytes:
        """The body's first bytes (after the head): the reconnection time."""
        return self.__framed(SSE_RETRY)

    def events(self, encoded: bytes, now: float) -> bytes:
        """``encoded`` events (:func:`hub.core.sse.event_lines`, or a stream of several
        topics' own) as the body's next bytes; the next heartbeat is due an interval later."""
        data = self.__framed(encoded)
        if data:
            self.__due = now + self.__terms.heartbeat_seconds
        return data

    def heartbeat_in(self, now: float) -> float:
        """Seconds until a heartbeat is due (0: now)."""
        return max(0.0, self.__due - now)

    def heartbeat(self, now: float) -> bytes:
        """A heartbeat when one is due at ``now``, else b""."""
        if now < self.__due:
            return b""
        return self.events(SSE_HEARTBEAT, now)

    def end(self, last: bytes, ended: str | None) -> tuple[bytes, float]:
        """The body's last bytes, ``last`` (:func:`topic_ending`, :func:`topics_ending`; b""
        for none) and, chunked, the end of the body; and how long the client gets to take
        them before its connection is cut off: a shutdown's own bound, which may be
        shorter (``shutdown_streams_seconds``), else ``stream_close_seconds``."""
        terms = self.__terms
        within = terms.close_seconds
        if ended == SHUTDOWN:
            within = min(within, terms.shutdown_close_seconds)
        if self.__done:  # its end was sent
            return b"", within
        data = self.__framed(last)
        self.__done = True
        if terms.chunked:
            data += LAST_CHUNK
        return data, within
