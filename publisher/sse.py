"""A reconnecting server-sent events client for live edit feeds.

The parsing is :mod:`rsclient.sse`'s. :class:`EventSource` owns the connection: it sends
``Last-Event-ID`` on every reconnect, so a server that supports resuming (Wikimedia
EventStreams does) continues after the last event seen, and it reconnects after
disconnects, timeouts and 5xx/429 answers with capped exponential back-off from the
reconnection time (the server's ``retry`` field once it sent one), honouring a 429's or
503's ``Retry-After`` (:class:`rsclient.backoff.Retrier`). Other answers
(4xx, 204, a content type other than ``text/event-stream``) and a broken stream (a line
beyond ``max_line_bytes``) end the iteration with :class:`~publisher.exceptions.FeedError`,
as the standard prescribes "fail the connection".
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping

import aiohttp

from rsclient.backoff import Backoff, Retrier, parse_retry_after
from rsclient.exceptions import EventStreamError
from rsclient.sse import MAX_LINE_CHARS, Event, EventParser, event_batches

from .exceptions import FeedError

__all__ = ["EventSource"]

log = logging.getLogger(__name__)

USER_AGENT = "rshub-publisher/0.1 (ResourceSync push hub; +https://github.com/)"


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
        max_line_bytes: int = MAX_LINE_CHARS,
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
        retry = Retrier(self._backoff())
        try:
            async for _ in retry:
                retry_after = None
                try:
                    async for event in self._connect(session):
                        retry.succeeded()
                        yield event
                    reason = "server closed the stream"
                # UnicodeError: redirected to a host no lookup can take (the resolver's
                # IDNA step), a failure to connect like any other.
                except (aiohttp.ClientError, TimeoutError, UnicodeError) as exc:
                    reason = f"{type(exc).__name__}: {exc}"
                except _Retryable as exc:
                    reason, retry_after = str(exc), exc.retry_after
                # Standard: after the stream ends, wait the reconnection time and reconnect.
                retry.policy = self._backoff()  # the server may have sent a new one
                wait = retry.failed(retry_after)
                log.warning(
                    "event stream %s: %s; reconnecting in %.1fs (Last-Event-ID %s)",
                    self.url,
                    reason,
                    wait,
                    self.last_event_id or "none",
                )
        finally:
            if own:
                await session.close()

    def _backoff(self) -> Backoff:
        """From the reconnection time (at least 10 ms), doubling, equal jitter."""
        first = max(self.reconnect_delay, 0.01)
        return Backoff(first, max(first, self.max_reconnect_delay))

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
                asked = parse_retry_after(resp.headers.get("Retry-After"))
                raise _Retryable(f"HTTP {resp.status} from {self.url}", asked)
            if resp.status != 200:
                text = (await resp.text(errors="replace"))[:200]
                raise FeedError(f"event stream {self.url} answered HTTP {resp.status}: {text}")
            if resp.content_type != "text/event-stream":
                raise FeedError(
                    f"event stream {self.url} has Content-Type {resp.content_type!r}, "
                    "not text/event-stream"
                )
            self.connections += 1
            parser = EventParser(
                max_line_bytes=self.max_line_bytes, last_event_id=self.last_event_id
            )
            try:
                async for events in event_batches(resp.content, parser):
                    for event in events:
                        self.last_event_id = event.id
                        yield event
                    # An id-only block (no data) still moves the resume point.
                    self.last_event_id = parser.block_event_id
                    if parser.retry is not None:
                        self.reconnect_delay = parser.retry / 1000
            except EventStreamError as exc:
                raise FeedError(f"event stream {self.url}: {exc}") from exc


class _Retryable(Exception):
    """An answer after which the standard (and Wikimedia's operators) expect a retry."""

    def __init__(self, error: str, retry_after: float | None = None) -> None:
        super().__init__(error)
        self.retry_after = retry_after
