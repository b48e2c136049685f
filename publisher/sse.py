"""A server-sent events client: a sans-I/O parser and a reconnecting aiohttp reader.

:class:`EventParser` interprets an ``text/event-stream`` byte stream exactly as the WHATWG
HTML standard ("Server-sent events", section 9.2.6) says: lines end in CRLF, LF or CR;
``data`` lines accumulate, ``id`` sets the last event id (ignored if it contains NUL),
``retry`` sets the reconnection time, lines starting with ``:`` are comments, an empty
line dispatches. It does no I/O and is tested with literal bytes.

:class:`EventSource` owns the connection: it sends ``Last-Event-ID`` on every reconnect,
so a server that supports resuming (Wikimedia EventStreams does) continues after the last
event seen, and it reconnects after disconnects, timeouts and 5xx/429 answers with capped
exponential back-off. Other answers (4xx, 204, a content type other than
``text/event-stream``) end the iteration with :class:`~publisher.exceptions.FeedError`,
as the standard prescribes "fail the connection".
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import random
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import aiohttp

from .exceptions import FeedError

__all__ = ["Event", "EventParser", "EventSource"]

log = logging.getLogger(__name__)

USER_AGENT = "rshub-publisher/0.1 (ResourceSync push hub; +https://github.com/)"


@dataclass(frozen=True, slots=True)
class Event:
    """One dispatched event."""

    #: The event's data: its ``data`` lines joined with ``\n``.
    data: str
    #: The event type (``event`` field), ``"message"`` by default.
    event: str = "message"
    #: The last event id in force when the event was dispatched ("" if none yet).
    id: str = ""


class EventParser:
    """Incremental event-stream parser: :meth:`feed` bytes, get :class:`Event` s back."""

    def __init__(self, *, max_line_bytes: int = 4 * 1024 * 1024) -> None:
        self.max_line_bytes = max_line_bytes
        #: The last event id buffer; survives dispatches, as the standard requires.
        self.last_event_id = ""
        #: The last event id as of the last complete block (blank line), dispatched or not:
        #: the safe point to resume from, unlike ``last_event_id`` mid-block.
        self.block_event_id = ""
        #: Reconnection time in milliseconds, once the server has sent ``retry``.
        self.retry: int | None = None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._started = False
        self._skip_lf = False  # the previous chunk ended in CR; a leading LF belongs to it
        self._data: list[str] = []
        self._event = ""

    def feed(self, chunk: bytes) -> list[Event]:
        """Consume ``chunk``; return the events it completes, in order.

        Raises:
            FeedError: a line grew beyond ``max_line_bytes`` (a broken or hostile server).
        """
        text = self._decoder.decode(chunk)
        if not self._started and text:
            self._started = True
            if text.startswith("\ufeff"):
                text = text[1:]
        if self._skip_lf and text:
            if text.startswith("\n"):
                text = text[1:]
            self._skip_lf = False
        buffer = self._pending + text
        events: list[Event] = []
        start = 0
        length = len(buffer)
        while start < length:
            cr = buffer.find("\r", start)
            lf = buffer.find("\n", start)
            if cr == -1 and lf == -1:
                break
            if cr == -1 or (lf != -1 and lf < cr):
                end, nxt = lf, lf + 1
            elif cr + 1 < length:
                end, nxt = cr, cr + 2 if buffer[cr + 1] == "\n" else cr + 1
            else:  # CR at the very end: the LF of a CRLF may come in the next chunk
                end, nxt = cr, cr + 1
                self._skip_lf = True
            event = self._line(buffer[start:end])
            if event is not None:
                events.append(event)
            start = nxt
        self._pending = buffer[start:]
        if len(self._pending) > self.max_line_bytes:
            raise FeedError(f"event-stream line longer than {self.max_line_bytes} characters")
        return events

    def _line(self, line: str) -> Event | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\x00" not in value:
                self.last_event_id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self.retry = int(value)
        return None

    def _dispatch(self) -> Event | None:
        self.block_event_id = self.last_event_id
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return Event(data="\n".join(data), event=event or "message", id=self.last_event_id)


class EventSource:
    """Follow an SSE URL forever, reconnecting and resuming from the last event id.

    Iterate with ``async for event in source``. ``last_event_id`` is what will be sent as
    ``Last-Event-ID`` on the next (re)connection; pass a saved one to resume after a
    restart. ``connections`` counts successful connections (1 + reconnects).
    """

    def __init__(
        self,
        url: str,
        *,
        session: aiohttp.ClientSession | None = None,
        last_event_id: str = "",
        headers: Mapping[str, str] | None = None,
        reconnect_delay: float = 1.0,
        max_reconnect_delay: float = 60.0,
        read_timeout: float = 120.0,
        max_line_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self.url = url
        self.last_event_id = last_event_id
        self.headers = dict(headers or {})
        self.reconnect_delay = reconnect_delay
        self.max_reconnect_delay = max_reconnect_delay
        self.read_timeout = read_timeout
        self.max_line_bytes = max_line_bytes
        self.connections = 0
        self._session = session

    async def __aiter__(self) -> AsyncIterator[Event]:
        own = self._session is None
        session = self._session or aiohttp.ClientSession()
        failures = 0
        delay = self.reconnect_delay
        try:
            while True:
                try:
                    async for event in self._connect(session):
                        failures = 0
                        yield event
                    reason = "server closed the stream"
                except (aiohttp.ClientError, TimeoutError) as exc:
                    reason = f"{type(exc).__name__}: {exc}"
                except _Retryable as exc:
                    reason = str(exc)
                # Standard: after the stream ends, wait the reconnection time and reconnect.
                failures += 1
                wait = min(delay * 2 ** (failures - 1), self.max_reconnect_delay)
                wait *= 0.5 + random.random() / 2
                log.warning(
                    "event stream %s: %s; reconnecting in %.1fs (Last-Event-ID %s)",
                    self.url,
                    reason,
                    wait,
                    self.last_event_id or "none",
                )
                await asyncio.sleep(wait)
        finally:
            if own:
                await session.close()

    async def _connect(self, session: aiohttp.ClientSession) -> AsyncIterator[Event]:
        headers = {
            "Accept": "text/event-stream",
            "Cache-Control": "no-cache",
            "User-Agent": USER_AGENT,
            **self.headers,
        }
        if self.last_event_id:
            headers["Last-Event-ID"] = self.last_event_id
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=self.read_timeout)
        async with session.get(self.url, headers=headers, timeout=timeout) as resp:
            if resp.status in (429, 502, 503, 504) or resp.status >= 500:
                raise _Retryable(f"HTTP {resp.status} from {self.url}")
            if resp.status != 200:
                text = (await resp.text(errors="replace"))[:200]
                raise FeedError(f"event stream {self.url} answered HTTP {resp.status}: {text}")
            if resp.content_type != "text/event-stream":
                raise FeedError(
                    f"event stream {self.url} has Content-Type {resp.content_type!r}, "
                    "not text/event-stream"
                )
            self.connections += 1
            parser = EventParser(max_line_bytes=self.max_line_bytes)
            parser.last_event_id = parser.block_event_id = self.last_event_id
            async for chunk in resp.content.iter_any():
                for event in parser.feed(chunk):
                    self.last_event_id = event.id
                    yield event
                # An id-only block (no data) still moves the resume point.
                self.last_event_id = parser.block_event_id
                if parser.retry is not None:
                    self.reconnect_delay = parser.retry / 1000


class _Retryable(Exception):
    """An answer after which the standard (and Wikimedia's operators) expect a retry."""
