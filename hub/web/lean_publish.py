"""A plain publish without aiohttp's per-request machinery.

``POST /topics/{name}``, plain by the lean paths' rule (:mod:`hub.core.plain_requests`:
HTTP/1.1 with ``Host``, each header once, ASCII, within aiohttp's limits...), with a
``Content-Length`` body small enough to parse inline, a plain XML ``Content-Type`` and only
the headers of :data:`_HEADERS`, is decided here from the bytes
:class:`hub.web.lean_connection.LeanConnection` parsed: :meth:`LeanPublishing.decide` runs
the publish's checks and parse (:meth:`hub.live.publication.Publishing.admit`, the same
ones aiohttp's handler runs) and declines on anything but success, before any side effect,
so aiohttp's path answers every error with its own message. Only then is the publish
stored (:meth:`Publishing.store`), and answered with the bytes aiohttp sends
(tests/hub/test_lean_publish.py compares them), the same metrics and access-log line, and
only then handed to the topic's live feed, so that the publisher's answer does not wait
behind the fan-out. A store that fails after the
append began cannot be handed over (it might store twice): its 503 is
:func:`hub.web.error_responses.storage_failure`'s.

Why (py-spy of ``bench/peer_nchan.py --only tput``, in the notes of the lean-publish runs in
bench/results/peer_nchan.jsonl): of ~1.0 ms of CPU per paced publish, aiohttp's request
path (protocol, request and response objects, the handler task, middleware, router,
signals) was the largest part after the parse and the Redis write.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Literal

import orjson
from aiohttp import web
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE

from hub.core.api_bodies import PublishAccepted
from hub.core.dump_links import holds_packages
from hub.core.exceptions import RequestError
from hub.core.log_format import REQUEST_ID
from hub.core.own_site import OwnSite
from hub.core.packed import Packed
from hub.core.request_headers import decoded
from hub.core.topics import check_name
from hub.live.publication import Publishing
from hub.store.redis_connection import StoreError
from hub.store.replicas import NotReplicated
from hub.web.access import ACCESS
from hub.web.admin import OBSERVING
from hub.web.error_responses import storage_failure
from hub.web.observe import REQUEST_ID_HEADER, log_access, observed, request_id
from hub.web.publish import PUBLISHING

log = logging.getLogger(__name__)

_ROUTE = "/topics/{name}"
_PREFIX = b"/topics/"
#: The request headers the lean path reads or that change nothing in the answer; a request
#: with any other (``Expect``, ``Transfer-Encoding``, ``Content-Encoding``, ``Origin``,
#: ``Connection``...) goes to aiohttp.
_HEADERS = frozenset(
    {
        b"host",
        b"user-agent",
        b"accept",
        b"accept-encoding",
        b"content-length",
        b"content-type",
        b"authorization",
        b"idempotency-key",
        b"x-request-id",
    }
)
_TOPICS_KEPT = 4096
_MEDIA_TYPES_KEPT = 64
_HOSTS_KEPT = 64
#: A media type without parameters, as aiohttp's ``content_type`` gives it (lower case).
_MEDIA_TYPE = re.compile(rb"[a-z0-9!#$&^_.+-]+/[a-z0-9!#$&^_.+-]+")


@dataclass(slots=True)
class PublishHead:
    """What a plain publish's head says."""

    topic: str
    length: int
    ctype: str
    authorization: str | None
    idempotency_key: str | None
    request_id: str


@dataclass(slots=True)
class Publish:
    """A publish decided: checked and parsed, not yet stored."""

    head: PublishHead
    key: str | None
    body: bytes
    changes: Packed


class LeanPublishing:
    """What the lean publish path needs of the app, looked up once."""

    __slots__ = (
        "_hosts",
        "_media_types",
        "_topics",
        "access_log",
        "ctx",
        "health",
        "max_body",
        "own_site",
        "urls",
    )

    def __init__(self, app: web.Application) -> None:
        self.ctx: Publishing = app[PUBLISHING]
        self.health = app[OBSERVING].health
        settings = self.ctx.settings
        self.access_log = settings.access_log
        #: Larger bodies are parsed off the loop, or refused (413): aiohttp's path.
        self.max_body = min(settings.max_body_bytes, self.ctx.parser.inline_bytes)
        #: Checked topic names and Content-Type values as sent, and what each is: a
        #: publisher sends the same few (bounded caches; the checks were a tenth of the
        #: head's work).
        self._topics: dict[bytes, str] = {}
        self._media_types: dict[bytes, str] = {}
        #: On a hub without tokens, the ``Host`` must name the hub (hub.core.own_site); a
        #: browser's publish also sends ``Origin`` and ``Sec-Fetch-Site``, so it is never
        #: lean. ``_hosts``: the ``Host`` values seen to name it (a publisher sends one).
        self.own_site: OwnSite | None = app[ACCESS].own_site if self.ctx.auth.open else None
        #: Where topic URLs are (a plain WebSub topic's publish is aiohttp's: its content).
        self.urls = app[ACCESS].urls
        self._hosts: set[bytes] = set()

    def head(self, url: bytes, seen: dict[bytes, bytes]) -> PublishHead | None:
        """The head of a plain publish the lean path serves as aiohttp would, else None;
        ``seen``: a plain request's headers by lower-case name (each once, ASCII: the
        lean paths' rule, :class:`hub.core.plain_requests.PlainRequests`)."""
        if not url.startswith(_PREFIX) or not _HEADERS.issuperset(seen):
            return None
        if self.own_site is not None and not self._own_host(seen.get(b"host")):
            return None  # aiohttp's path refuses it, naming the header
        length = seen.get(b"content-length")
        if length is None or not length.isdigit() or int(length) > self.max_body:
            return None
        ctype = seen.get(b"content-type")
        ctype_str = "" if ctype is None else self._media_types.get(ctype)
        if ctype_str is None:
            assert ctype is not None
            lowered = ctype.strip().lower()  # (aiohttp strips and lowers it too)
            if _MEDIA_TYPE.fullmatch(lowered) is None:
                return None  # parameters, say: aiohttp's parse decides
            ctype_str = lowered.decode()
            if len(self._media_types) < _MEDIA_TYPES_KEPT:
                self._media_types[ctype] = ctype_str
        name = url[len(_PREFIX) :]
        topic = self._topics.get(name)
        if topic is None:
            try:
                topic = check_name(name.decode("ascii"))
            except (RequestError, UnicodeDecodeError):
                return None  # aiohttp answers it (400, or 404 for another path)
            if len(self._topics) >= _TOPICS_KEPT:
                self._topics.clear()
            self._topics[name] = topic
        if self.ctx.contents is not None and self.ctx.plain(topic, self.urls.topic(topic)):
            return None  # its content, of any type: aiohttp's path stores it
        authorization = seen.get(b"authorization")
        given_key = seen.get(b"idempotency-key")
        try:  # the hub's one header rule; what it refuses, aiohttp's path answers (400)
            auth_text = None if authorization is None else decoded("Authorization", authorization)
            key_text = None if given_key is None else decoded("Idempotency-Key", given_key)
        except RequestError:
            return None
        return PublishHead(
            topic,
            int(length),
            ctype_str,
            auth_text,
            key_text,
            request_id(seen.get(b"x-request-id", b"").decode()),
        )

    def _own_host(self, host: bytes | None) -> bool:
        if host is None or host in self._hosts:
            return True
        assert self.own_site is not None
        if not self.own_site.names_host(host.decode("ascii")):
            return False
        if len(self._hosts) < _HOSTS_KEPT:
            self._hosts.add(host)
        return True

    def decide(self, head: PublishHead, body: bytes) -> Publish | None:
        """The publish checked and parsed, by the code aiohttp's handler runs; None for any
        outcome but success (nothing was stored: aiohttp's path answers it)."""
        ctx = self.ctx
        try:
            key = ctx.admit(head.topic, head.authorization, head.ctype, head.idempotency_key)
            changes = ctx.parser.packed_inline(body)
        except Exception:  # every error is answered (and logged) in one place: aiohttp's
            return None
        if holds_packages(changes):
            return None  # a changedump-notification: aiohttp's path keeps what it declares
        return Publish(head, key, body, changes)

    def begin(self, publish: Publish) -> asyncio.Future[Any] | None:
        """Start storing ``publish`` without a task (measured: a task and five coroutine
        frames per publish were a tenth of its work): the store's call under way, which
        :meth:`finish` answers once done; None when :meth:`serve` must, in a task (the
        topic's first publish in this process)."""
        head = publish.head
        token = REQUEST_ID.set(head.request_id)
        try:
            return self.ctx.store_now(head.topic, publish.body, publish.changes, publish.key)
        except Exception:  # nothing was sent: serve() meets it again, and answers it
            return None
        finally:
            REQUEST_ID.reset(token)

    def finish(
        self,
        publish: Publish,
        pending: asyncio.Future[Any],
        transport: asyncio.Transport,
        started: float,
    ) -> bool | Literal["again"] | None:
        """:meth:`serve`'s answer once :meth:`begin`'s call is done; ``"again"`` when
        nothing ran (Redis had not loaded the script): :meth:`serve` stores it then."""
        head = publish.head
        token = REQUEST_ID.set(head.request_id)
        try:
            try:
                done = self.ctx.stored(
                    pending, head.topic, publish.body, publish.changes, publish.key
                )
            except Exception as exc:
                return self._failed(exc, head, transport, started)
            if done is None:
                return "again"
            answer, stored = done
            kept = self._answer(answer, head, transport, started)
            # Only now the fan-out: the publisher's 202 is not queued behind every
            # subscriber's write (measured: its round trip at 100 subscribers, 5.8 → 1.4 ms).
            try:
                self.ctx.ingest.appended(head.topic, stored)
            except Exception:  # answered already; the next append finds the gap and reads it
                log.exception("handing the publish to %r's live feed failed", head.topic)
            return kept
        finally:
            REQUEST_ID.reset(token)

    async def serve(
        self, publish: Publish, transport: asyncio.Transport, started: float
    ) -> bool | None:
        """Store ``publish`` and answer it on ``transport``; whether the connection stays
        open for another request, or None when the store refused it having stored nothing
        (an Idempotency-Key reused for another body): aiohttp's path answers it then."""
        head = publish.head
        token = REQUEST_ID.set(head.request_id)
        try:
            try:
                answer = await self.ctx.store(
                    head.topic, publish.body, publish.changes, publish.key
                )
            except Exception as exc:
                return self._failed(exc, head, transport, started)
            return self._answer(answer, head, transport, started)
        finally:
            REQUEST_ID.reset(token)

    def _answer(
        self,
        answer: PublishAccepted,
        head: PublishHead,
        transport: asyncio.Transport,
        started: float,
    ) -> bool:
        if not transport.is_closing():
            transport.write(
                _response(202, "application/json", orjson.dumps(answer), head.request_id)
            )
        self._observe(head.topic, 202, started, transport)
        return True

    def _failed(
        self, exc: Exception, head: PublishHead, transport: asyncio.Transport, started: float
    ) -> bool | None:
        """The answer to a store that raised ``exc``."""
        if isinstance(exc, RequestError):
            return None
        if not isinstance(exc, (NotReplicated, StoreError)):
            log.error("lean publish to %r failed", head.topic, exc_info=exc)
            self._observe(head.topic, 500, started, transport)
            transport.close()
            return False
        response = storage_failure(exc, self.health, "POST", f"/topics/{head.topic}")
        assert isinstance(response.body, bytes)
        if not transport.is_closing():
            ctype = f"{response.content_type}; charset={response.charset}"
            transport.write(_response(response.status, ctype, response.body, head.request_id))
        self._observe(head.topic, response.status, started, transport)
        return True

    def _observe(
        self, topic: str, status: int, started: float, transport: asyncio.Transport
    ) -> None:
        elapsed = time.perf_counter() - started
        observed("POST", _ROUTE, status, elapsed, publish=True)
        if self.access_log:
            peer = transport.get_extra_info("peername")
            path = f"/topics/{topic}"
            log_access("POST", path, _ROUTE, status, elapsed, peer[0] if peer else None)


def _response(status: int, ctype: str, body: bytes, rid: str) -> bytes:
    """The bytes aiohttp sends for a ``web.Response`` of ``body`` (tests compare them)."""
    start = _STARTS.get((status, ctype))
    if start is None:
        start = _STARTS[(status, ctype)] = (
            f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: {ctype}\r\n"
        )
    return (
        f"{start}Content-Length: {len(body)}\r\nDate: {rfc822_formatted_time()}\r\n"
        f"{_SERVER}{rid}\r\n\r\n"
    ).encode() + body


#: A response's first two lines by status and Content-Type (a handful: 202 and the 503s).
_STARTS: dict[tuple[int, str], str] = {}
_SERVER = f"Server: {SERVER_SOFTWARE}\r\n{REQUEST_ID_HEADER}: "
