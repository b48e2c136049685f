"""The hub's stream of several topics on one connection, followed across reconnections.

``GET {hub}/events?topic=a&topic=b&topic_prefix=p`` (SSE) or ``{hub}/ws?...`` (WebSocket):
the changes of every topic named or under a prefix, each naming its topic, and after each
the stream's composite resume id (``m1.``...), which resumes every topic exactly: nothing
lost, nothing repeated (docs/hub.md, "Several topics on one connection"). A client that
follows many topics holds one connection rather than one per topic.

:class:`TopicsStream` yields :class:`Delivery`\\ s: the changes of a message (SSE: of what one
read brought) and the resume id after them. It also yields the id alone where the stream
starts (its first message), so that a position saved then resumes exactly even before a
change arrives, and a topic the hub says was deleted (the stream goes on without it). It
reconnects from the last id on any loss: at once after the hub's own ending (shutdown, too
slow, a resume id full), else after a back-off with jitter up to ``max_backoff``, forever.
A 4xx answer raises :class:`HubRefused` (no retry can fix it).

There is no polling fallback here: the hub's Change Lists are per topic. Following one
topic is :class:`subscriber.stream.HubStream`'s, with the follower's fallbacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlencode

import aiohttp
import orjson
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI, WebSocketException

from rsclient.backoff import Backoff, Retrier, parse_retry_hint
from rsclient.exceptions import EventStreamError
from rsclient.sse import EventParser, event_batches

from .events import ChangeEvent, is_package
from .exceptions import HubRefused, MalformedEvent, PushUnavailable, StreamClosed
from .filters import ChangeFilter
from .refusal import error_text, refusal
from .stream import open_event_stream

__all__ = ["Delivery", "TopicsStream"]

log = logging.getLogger(__name__)

#: Largest WebSocket message taken (as :mod:`subscriber.stream`).
MAX_MESSAGE_BYTES = 4 * 2**20
#: SSE events by which the hub ends a stream, each with the id to resume from.
_ENDINGS = frozenset({"error", "shutdown", "deleted"})


@dataclass(frozen=True, slots=True)
class Delivery:
    """What one message brought: its changes (each naming its topic), the stream's resume id
    after them, and the topic the hub said was deleted, if it said so."""

    events: list[ChangeEvent]
    resume_id: str
    deleted: str | None = None


def _changes(items: object) -> list[ChangeEvent]:
    """The changes of a message's events (packages of Change Dumps gone past); a message
    that is not one raises :class:`MalformedEvent`."""
    if not isinstance(items, list):
        raise MalformedEvent(f"not a list of change events: {str(items)[:200]!r}")
    try:
        events = [ChangeEvent.from_json(item) for item in items if not is_package(item)]
    except ValueError as exc:
        raise MalformedEvent(f"not a change event ({exc})") from None
    if any(event.topic is None for event in events):
        raise MalformedEvent("a change of a stream of several topics names no topic")
    return events


class TopicsStream:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        hub: str,
        *,
        topics: list[str],
        prefixes: list[str],
        transport: Literal["ws", "sse"] = "ws",
        since: str | None = None,
        token: str | None = None,
        event_filter: ChangeFilter | None = None,
        connect_timeout: float = 5.0,
        heartbeat: float = 10.0,
        max_backoff: float = 30.0,
    ) -> None:
        """``since``: a resume id of this stream, an event id or a time (every topic from
        there); None: every topic from its current end."""
        self.session = session
        self.hub = hub.rstrip("/")
        self.topics = topics
        self.prefixes = prefixes
        self.transport = transport
        #: Where the next connection resumes: the id after the last message handed over.
        self.resume_id = since
        self.event_filter = event_filter
        self.connect_timeout = connect_timeout
        self.heartbeat = heartbeat
        self.max_backoff = max_backoff
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}

    def _params(self) -> list[tuple[str, str]]:
        params = [("topic", topic) for topic in self.topics]
        params += [("topic_prefix", prefix) for prefix in self.prefixes]
        if self.event_filter is not None:
            params += self.event_filter.fields("change", "prefix")
        return params

    async def deliveries(self) -> AsyncIterator[Delivery]:
        """Every message in order, across reconnections (see the module docstring)."""
        retry = Retrier(Backoff(0.1, max(0.1, self.max_backoff)))
        async for _ in retry:
            try:
                async for delivery in self.connection():
                    retry.succeeded()
                    self.resume_id = delivery.resume_id
                    yield delivery
                raise PushUnavailable("stream ended")
            except StreamClosed as exc:
                wait = parse_retry_hint(exc.reason, cap=self.max_backoff) or 0.0
                log.info("%s; resuming from %s in %.2fs", exc, self.resume_id, wait)
                if wait:
                    await asyncio.sleep(wait)  # the hub asked for it
            except PushUnavailable as exc:
                log.warning("%s; reconnecting in %.1fs", exc, retry.failed())

    def connection(self) -> AsyncIterator[Delivery]:
        """One connection's messages, from :attr:`resume_id`, until it ends: then raises
        why (:class:`StreamClosed`: the hub ended it; :class:`MalformedEvent`: it sent what
        is no message of such a stream; :class:`PushUnavailable`: it was lost)."""
        return self._ws() if self.transport == "ws" else self._sse()

    async def _sse(self) -> AsyncIterator[Delivery]:
        url = f"{self.hub}/events"
        headers = {"Accept": "text/event-stream", **self._headers}
        if self.resume_id:
            headers["Last-Event-ID"] = self.resume_id
        async with open_event_stream(
            self.session, url, self._params(), headers, self.connect_timeout
        ) as resp:
            parser = EventParser()
            #: The id last handed over, and the id of the last change read.
            mark = at = self.resume_id or ""
            try:
                async for messages in event_batches(resp.content, parser):
                    changes: list[ChangeEvent] = []
                    for msg in messages:
                        try:
                            if msg.event == "message":
                                read = _changes([orjson.loads(msg.data)])
                            elif msg.event == "topic-deleted":
                                deleted = _deleted_topic(msg.data)
                        except (ValueError, MalformedEvent) as exc:
                            if changes:  # what came before it is handed over
                                yield Delivery(changes, at)
                            raise MalformedEvent(f"{url}: not a change event ({exc})") from None
                        if msg.event == "message":
                            changes += read
                            at = msg.id
                        elif msg.event == "topic-deleted":
                            if changes:
                                yield Delivery(changes, at)
                                changes = []
                            yield Delivery([], msg.id, deleted)
                            mark = at = msg.id
                        elif msg.event in _ENDINGS:  # the hub ended it: resume from its id
                            ending = msg.id or at
                            if ending and (changes or ending != mark):
                                yield Delivery(changes, ending)
                            raise StreamClosed(1001, msg.data)
                    resume_id = parser.block_event_id
                    if resume_id and (changes or resume_id != mark):
                        yield Delivery(changes, resume_id)  # the opening id too
                        mark = at = resume_id
            except EventStreamError as exc:
                raise PushUnavailable(f"{url}: {exc}") from exc
            except (aiohttp.ClientError, OSError) as exc:
                raise PushUnavailable(f"{url}: {exc}") from exc

    def _ws_url(self) -> str:
        params = self._params()
        if self.resume_id:
            params.append(("since", self.resume_id))
        base = "ws" + self.hub.removeprefix("http") if self.hub.startswith("http") else self.hub
        return f"{base}/ws?{urlencode(params)}"

    async def _ws(self) -> AsyncIterator[Delivery]:
        url = self._ws_url()
        try:
            async with contextlib.AsyncExitStack() as stack:
                ws = await stack.enter_async_context(
                    connect(
                        url,
                        additional_headers=self._headers,
                        open_timeout=self.connect_timeout,
                        close_timeout=self.connect_timeout,
                        ping_interval=self.heartbeat,
                        ping_timeout=self.heartbeat,
                        max_size=MAX_MESSAGE_BYTES,
                        compression=None,
                        proxy=None,
                        logger=log,
                    )
                )
                while True:
                    try:
                        data = await ws.recv()
                    except ConnectionClosed as exc:
                        frame = exc.rcvd or exc.sent
                        code = frame.code if frame is not None else 1006
                        raise StreamClosed(code, frame.reason if frame else "") from None
                    yield _message(data)
        except InvalidStatus as exc:
            response = exc.response
            if refusal(response.status_code):
                raise HubRefused(
                    response.status_code, error_text(response.body, response.reason_phrase)
                ) from None
            raise PushUnavailable(f"cannot open {url}: {exc}") from None
        except (InvalidURI, WebSocketException, TimeoutError, OSError) as exc:
            raise PushUnavailable(f"cannot open {url}: {exc or type(exc).__name__}") from None


def _message(data: str | bytes) -> Delivery:
    """A WebSocket message: ``{"id": ..., "events": [...]}``, with ``"topic_deleted"`` when
    the hub says a topic was deleted."""
    try:
        message = orjson.loads(data)
    except ValueError as exc:
        raise MalformedEvent(f"not a message of a stream of several topics ({exc})") from None
    resume_id = message.get("id") if isinstance(message, dict) else None
    if not isinstance(resume_id, str) or not resume_id:
        raise MalformedEvent(f"a message without its resume id: {str(data)[:200]!r}")
    deleted = message.get("topic_deleted")
    if deleted is not None and (not isinstance(deleted, str) or not deleted):
        raise MalformedEvent(f"topic_deleted is not a topic name: {deleted!r:.200}")
    return Delivery(_changes(message.get("events")), resume_id, deleted)


def _deleted_topic(data: str) -> str:
    try:
        topic = orjson.loads(data).get("topic")
    except (ValueError, AttributeError):
        topic = None
    if not isinstance(topic, str) or not topic:
        raise MalformedEvent(f"event: topic-deleted without a topic: {data[:200]!r}")
    return topic
