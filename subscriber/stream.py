"""The hub's WebSocket and server-sent-event streams of one topic.

``GET {hub}/topics/{name}/ws?since=ID``: each text message is a JSON array of events.
``GET {hub}/topics/{name}/events``: each SSE message is one JSON event, ``id:`` its event
id; resumed with ``Last-Event-ID``.

:class:`HubStream` yields batches of :class:`ChangeEvent` and remembers the last event id.
When the hub closes the WebSocket because the client is too slow (1008 policy violation,
1013 try again later) or because the hub process is shutting down (1001 going away, SSE
``event: shutdown``), it reconnects from that id: at once, or after the wait the hub's
message asks for (``retry after S s``, :func:`rsclient.backoff.parse_retry_hint`; the hub
spreads the clients one publish storm drops over a window, so that they do not all come
back, and lag again, together), at most ``max_backoff``; after a shutdown, to the next of
``other_hubs`` if given (the same URL reaches another worker of ``rshub serve --workers``).
Any other loss (4401: a signed token expired; 1011; the connection cut) raises
:class:`StreamClosed` or :class:`PushUnavailable` unless ``persistent=True``, in which
case it reconnects with exponential back-off from 0.1 s, capped at ``max_backoff``, with
equal jitter (so that the subscribers of a hub that restarts do not all come back at the
same instants), forever.
A 4xx answer (a bad topic name, a ``since`` the hub does not know or no longer retains, a
missing or refused token) raises :class:`HubRefused` with the hub's message: no retry can
fix it.

The WebSocket is websockets' reconnecting asyncio client (``connect()`` as an async
iterator, :func:`websockets.asyncio.client.connect`): a connection it cannot open for a
passing reason (refused, timed out, 5xx) it opens again after the back-off above, when the
stream is persistent and has no other hub to move to. Each connection it opens is read
until it closes; the next one starts after the last event handed over, so each starts
afresh (``since=`` is in its URL). The token goes in the handshake's ``Authorization``.

No back-pressure reaches the hub beyond TCP's: a slow consumer is closed by the hub and
resumes; nothing is lost as long as the hub retains the events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Generator
from dataclasses import replace
from typing import Literal, cast
from urllib.parse import urlencode

import aiohttp
import orjson
import websockets.client
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from rsclient.backoff import Backoff, Retrier, parse_retry_hint
from rsclient.exceptions import EventStreamError
from rsclient.sse import EventParser, event_batches

from .events import ChangeEvent, is_package
from .exceptions import HubRefused, MalformedEvent, PushUnavailable, StreamClosed
from .filters import ChangeFilter
from .refusal import error_message, error_text, refusal

__all__ = ["RESUMABLE_CLOSE_CODES", "HubStream", "Transport"]

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def open_event_stream(
    session: aiohttp.ClientSession,
    url: str,
    params: list[tuple[str, str]],
    headers: dict[str, str],
    connect_timeout: float,
) -> AsyncIterator[aiohttp.ClientResponse]:
    """An SSE response of the hub's, open and 200, for the one-topic stream and the stream
    of several topics alike; else why not: :class:`HubRefused` (a refusal, with the hub's
    words), :class:`PushUnavailable` (no connection within ``connect_timeout``, or another
    status)."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout)
    try:
        async with asyncio.timeout(connect_timeout):  # keeps a cancel (wait_for may not)
            resp = await session.get(url, params=params, headers=headers, timeout=timeout)
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise PushUnavailable(f"cannot open {url}: {exc}") from exc
    async with resp:
        if refusal(resp.status):
            raise HubRefused(resp.status, await error_message(resp))
        if resp.status != 200:
            raise PushUnavailable(f"{url}: HTTP {resp.status}")
        yield resp


Transport = Literal["ws", "sse"]

#: WebSocket close codes after which the client reconnects immediately from its last id.
RESUMABLE_CLOSE_CODES = frozenset({1001, 1008, 1013})
#: The hub process is going away (SIGTERM): reconnect now, preferably elsewhere.
GOING_AWAY = 1001
#: No close frame came: the connection was cut (RFC 6455 Section 7.1.5).
ABNORMAL = 1006
#: Largest WebSocket message taken (as aiohttp's client took): a hub's batch is far smaller;
#: a larger one closes the stream (1009), and the follower polls instead.
MAX_MESSAGE_BYTES = 4 * 2**20


def _events(data: str | bytes, topic: str) -> list[ChangeEvent]:
    """The changes of one message (a JSON event, or an array of them).

    Packages of Change Dumps (``change`` ``changedump``) are gone past.

    Raises :class:`MalformedEvent` (a :class:`PushUnavailable`) for anything else: the
    follower then leaves push for the hub's Change Lists, which lose nothing, where a
    message skipped would lose its changes and one raised as it came ended the command.
    """
    try:
        payload = orjson.loads(data)
        items = payload if isinstance(payload, list) else [payload]
        # A Change Dump's package (a changedump-notification) changes no one resource.
        events = [ChangeEvent.from_json(item) for item in items if not is_package(item)]
    except ValueError as exc:  # orjson.JSONDecodeError is one
        raise MalformedEvent(f"not a change event ({exc}): {data[:200]!r}") from None
    return [e if e.topic is not None else replace(e, topic=topic) for e in events]


class HubStream:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        hub: str,
        topic: str,
        *,
        transport: Transport = "ws",
        since: str | None = None,
        token: str | None = None,
        persistent: bool = False,
        connect_timeout: float = 5.0,
        heartbeat: float = 10.0,
        max_backoff: float = 30.0,
        other_hubs: tuple[str, ...] = (),
        event_filter: ChangeFilter | None = None,
    ) -> None:
        """``other_hubs``: more processes of the same hub (same Redis), tried in turn when
        the current one shuts down or cannot be reached; ``event_filter``: the changes the
        hub sends (``?change=&prefix=``)."""
        self.session = session
        self.hub = hub.rstrip("/")
        self._hubs = (self.hub, *(h.rstrip("/") for h in other_hubs))
        self.topic = topic
        self.transport = transport
        #: Id of the last event yielded; the next connection resumes after it.
        self.last_id = since
        self.persistent = persistent
        self.connect_timeout = connect_timeout
        self.heartbeat = heartbeat
        self.max_backoff = max_backoff
        self.event_filter = event_filter
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        #: Set once a connection is established; cleared when it is lost.
        self.connected = asyncio.Event()

    async def batches(self) -> AsyncGenerator[list[ChangeEvent], None]:
        """Batches of events in order, across reconnections."""
        retry = Retrier(Backoff(0.1, max(0.1, self.max_backoff)))
        async for _ in retry:
            try:
                follow = self._ws if self.transport == "ws" else self._sse
                async for batch in follow():
                    retry.succeeded()
                    if batch:
                        self.last_id = batch[-1].id or self.last_id
                        yield batch
                raise PushUnavailable("stream ended")
            except StreamClosed as exc:
                self.connected.clear()
                if exc.code == GOING_AWAY:
                    self._next_hub()
                if exc.code in RESUMABLE_CLOSE_CODES:
                    wait = parse_retry_hint(exc.reason, cap=self.max_backoff) or 0.0
                    log.info(
                        "%s; resuming after %s from %s in %.2fs", exc, self.last_id, self.hub, wait
                    )
                    if wait:
                        await asyncio.sleep(wait)  # when the hub asked: the wait is the point
                    continue
                if not self.persistent:
                    raise
                log.warning("%s; reconnecting in %.1fs", exc, retry.failed())
            except PushUnavailable as exc:
                self.connected.clear()
                if not self.persistent:
                    raise
                self._next_hub()
                log.warning("%s; reconnecting in %.1fs", exc, retry.failed())

    def _next_hub(self) -> None:
        """Move on to the next hub process (a no-op with just one)."""
        self.hub = self._hubs[(self._hubs.index(self.hub) + 1) % len(self._hubs)]

    def _filter_params(self) -> list[tuple[str, str]]:
        return [] if self.event_filter is None else self.event_filter.fields("change", "prefix")

    def _ws_url(self) -> str:
        """This connection's URL: after the last event handed over, with the filter."""
        params = [("since", self.last_id)] if self.last_id else []
        params += self._filter_params()
        base = "ws" + self.hub.removeprefix("http") if self.hub.startswith("http") else self.hub
        url = f"{base}/topics/{self.topic}/ws"
        return f"{url}?{urlencode(params)}" if params else url

    def _delays(self) -> Generator[float, None, None]:
        """websockets' waits between attempts to open one URL: :class:`Backoff`'s."""
        policy = Backoff(0.1, max(0.1, self.max_backoff))
        attempt = 0
        while True:
            attempt += 1
            yield policy.delay(attempt)

    def _opening_failed(self, url: str, exc: Exception) -> Exception | None:
        """websockets' ``process_exception``: ``None`` to open ``url`` again after the
        back-off, else the exception that ends this URL's iterator."""
        if isinstance(exc, InvalidStatus) and refusal(exc.response.status_code):
            response = exc.response
            return HubRefused(
                response.status_code, error_text(response.body, response.reason_phrase)
            )
        passing = websockets.client.process_exception(exc) is None
        if passing and self.persistent and len(self._hubs) == 1:
            log.info("cannot open %s (%s); retrying", url, exc)
            return None
        return PushUnavailable(f"cannot open {url}: {exc or type(exc).__name__}")

    async def _ws(self) -> AsyncIterator[list[ChangeEvent]]:
        url = self._ws_url()
        connections = cast(
            AsyncGenerator[ClientConnection, None],
            aiter(
                connect(
                    url,
                    additional_headers=self._headers,
                    process_exception=lambda exc: self._opening_failed(url, exc),
                    reconnect_delays=self._delays,
                    open_timeout=self.connect_timeout,
                    close_timeout=self.connect_timeout,
                    ping_interval=self.heartbeat,
                    ping_timeout=self.heartbeat,
                    max_size=MAX_MESSAGE_BYTES,
                    compression=None,  # the hub's frames are not compressed
                    proxy=None,  # as aiohttp's session: no proxy from the environment
                    logger=log,
                )
            ),
        )
        # Closed on the way out (the consumer stopped, a close ended the connection): the
        # iterator's own ``async with`` then closes the connection, now.
        async with contextlib.aclosing(connections):
            async for ws in connections:
                log.info("connected to %s since %s", url, self.last_id)
                self.connected.set()
                while True:
                    try:
                        message = await ws.recv()
                    except ConnectionClosed as exc:
                        # The hub's own code is in the close frame it sent; without one
                        # the connection was cut.
                        frame = exc.rcvd or exc.sent
                        code = frame.code if frame is not None else ABNORMAL
                        raise StreamClosed(code, frame.reason if frame else "") from None
                    yield _events(message, self.topic)

    async def _sse(self) -> AsyncIterator[list[ChangeEvent]]:
        url = f"{self.hub}/topics/{self.topic}/events"
        headers = {"Accept": "text/event-stream", **self._headers}
        if self.last_id:
            headers["Last-Event-ID"] = self.last_id
        async with open_event_stream(
            self.session, url, self._filter_params(), headers, self.connect_timeout
        ) as resp:
            self.connected.set()
            parser = EventParser()
            try:
                async for events in event_batches(resp.content, parser):
                    for msg in events:
                        if msg.event == "error":  # the hub's "too slow, resume" notice
                            raise StreamClosed(1013, msg.data)
                        if msg.event == "shutdown":  # the hub process is going away
                            raise StreamClosed(GOING_AWAY, msg.data)
                        if msg.event not in ("message", "change"):
                            continue
                        batch = _events(msg.data, self.topic)
                        if msg.id and batch and batch[-1].id is None:
                            batch[-1] = replace(batch[-1], id=msg.id)
                        yield batch
            except EventStreamError as exc:
                raise PushUnavailable(f"{url}: {exc}") from exc
            except (aiohttp.ClientError, OSError) as exc:
                raise PushUnavailable(f"{url}: {exc}") from exc
