"""Server-sent events: a sans-I/O parser and a thin aiohttp reader.

:class:`EventParser` interprets a ``text/event-stream`` exactly as the WHATWG HTML
standard ("Server-sent events", section 9.2.6) says: a leading BOM is dropped; lines end
in CRLF, LF or CR (split anywhere across chunks); ``data`` lines accumulate, joined with
``\\n``; ``id`` sets the last event id (ignored if it contains NUL) and survives dispatches;
``retry`` sets the reconnection time; lines starting with ``:`` are comments; an empty line
dispatches. Feed it bytes (:meth:`EventParser.feed`) or lines already split
(:meth:`EventParser.feed_line`); it does no I/O and is tested with literal bytes.

:func:`event_batches` feeds it an aiohttp response body. Reconnection policy is the
caller's: the publisher's :class:`publisher.sse.EventSource` and the subscriber's
:class:`subscriber.stream.HubStream` resume differently.
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp

from .exceptions import EventStreamError

__all__ = ["MAX_LINE_CHARS", "Event", "EventParser", "event_batches"]

#: Longest line accepted by default: a guard against a broken or hostile server.
MAX_LINE_CHARS = 4 * 1024 * 1024


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

    def __init__(self, *, max_line_bytes: int = MAX_LINE_CHARS, last_event_id: str = "") -> None:
        self.max_line_bytes = max_line_bytes
        #: The last event id buffer; survives dispatches, as the standard requires.
        self.last_event_id = last_event_id
        #: The last event id as of the last complete block (blank line), dispatched or not:
        #: the safe point to resume from, unlike ``last_event_id`` mid-block.
        self.block_event_id = last_event_id
        #: Reconnection time in milliseconds, once the server has sent ``retry``.
        self.retry: int | None = None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._started = False
        self._skip_lf = False  # the previous chunk ended in CR; a leading LF belongs to it
        self._data: list[str] = []
        #: Characters in ``_data``: one event is bounded like one line, or a server that
        #: sends ``data`` lines and never a blank one would grow it without end.
        self._data_chars = 0
        self._event = ""

    def feed(self, chunk: bytes) -> list[Event]:
        """Consume ``chunk``; return the events it completes, in order.

        Raises:
            EventStreamError: a line, or an event's data, grew beyond ``max_line_bytes``
                characters.
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
            event = self.feed_line(buffer[start:end])
            if event is not None:
                events.append(event)
            start = nxt
        self._pending = buffer[start:]
        if len(self._pending) > self.max_line_bytes:
            raise EventStreamError(
                f"event-stream line longer than {self.max_line_bytes} characters"
            )
        return events

    def feed_line(self, line: str) -> Event | None:
        """Consume one line without its end-of-line; the event it dispatches, if any.

        Raises:
            EventStreamError: the event's data grew beyond ``max_line_bytes`` characters.
        """
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data_chars += len(value) + 1
            if self._data_chars > self.max_line_bytes:
                raise EventStreamError(
                    f"event-stream event longer than {self.max_line_bytes} characters"
                )
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
        self._data, self._event, self._data_chars = [], "", 0
        if not data:
            return None
        return Event(data="\n".join(data), event=event or "message", id=self.last_event_id)


async def event_batches(
    content: aiohttp.StreamReader, parser: EventParser
) -> AsyncIterator[list[Event]]:
    """The events each chunk of a response body completes, as the chunks arrive.

    A chunk that completes none yields ``[]``, so that the caller can look at the
    parser's ``block_event_id`` and ``retry`` after every chunk.

    Raises:
        EventStreamError: from the parser.
    """
    async for chunk in content.iter_any():
        yield parser.feed(chunk)
