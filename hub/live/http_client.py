"""The hub's outgoing HTTP: WebSub verification, deliveries and ping fetches.

All of it goes through :class:`hub.live.callback_connections.CallbackConnections`: one
client, one pool of keep-alive connections, one TLS context, one set of bounds. Never
follows redirects, bounds every request in time, and reads at most the bytes asked for.
Unless private callbacks are allowed, every connection is checked against the address it is
about to connect to (:func:`hub.core.addresses.refusal`): the check sits where the
connection is made, so it covers verifications, deliveries and ping fetches, IP literals as
well as names, and a name whose DNS answer changes after the subscribe-time check (DNS
rebinding). Failures before an HTTP answer become :class:`CallbackFailed`, the one error
:mod:`hub.live.delivery` handles.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from hub.core.addresses import refusal
from hub.core.exceptions import BadGateway, BadRequest, CallbackFailed, PayloadTooLarge
from hub.core.settings import Settings
from hub.core.tasks import Tasks
from hub.live.callback_connections import CallbackConnections, Prefix, Started, tls_context
from rsclient.host_names import ascii_host

_PING_HEADERS = {"Accept": "application/xml"}
#: A plain topic's content is delivered as it is served: asked for unencoded.
_CONTENT_HEADERS = {"Accept": "*/*", "Accept-Encoding": "identity"}


@dataclass(frozen=True, slots=True)
class Answer:
    """What a callback answered; header names are lower-case."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


class HttpClient:
    """Deliveries (:meth:`post`), verifications (:meth:`get`) and ping fetches."""

    def __init__(self, settings: Settings, tasks: Tasks | None = None) -> None:
        self.settings = settings
        #: Deliveries in flight. A delivery's timeout starts once it has a slot: with the
        #: limit on the connector instead, time queued for a connection counted against
        #: the timeout, so a burst to many callbacks failed deliveries that never left.
        self._delivery_slots = _Slots(settings.delivery_concurrency)
        self.connections = CallbackConnections(
            allow_private=settings.allow_private_callbacks,
            max_idle_per_origin=settings.delivery_concurrency,
            # RSHUB_CALLBACK_CA_FILE, ...: for every request, not only POSTs; checked at
            # start-up. Without them the system's context is made off the start-up path
            # (Runtime.start): loading the CAs held up a restarted hub's first answer.
            tls=tls_context(
                settings.callback_ca_file,
                settings.callback_client_cert,
                settings.callback_client_key,
            )
            if settings.callback_ca_file or settings.callback_client_cert
            else None,
            tasks=tasks,
        )

    async def close(self) -> None:
        await self.connections.close()

    async def deliveries_answered(self, timeout: float) -> None:
        """Wait until no delivery POST is in flight, or ``timeout`` passed."""
        await self._delivery_slots.all_free(timeout)

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Answer:
        """A delivery: the answer's status and headers (its body is skipped)."""
        await self._delivery_slots.take()
        try:
            status, answer_headers = await self.connections.post(
                url, body, headers, self.settings.delivery_timeout
            )
        finally:
            self._delivery_slots.give()
        return Answer(status, answer_headers)

    def begin_post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Started | None:
        """:meth:`post` written now, without waiting for anything: None (nothing sent) when
        that would wait (no slot free, no idle connection to the callback) or fail (then
        :meth:`post` says why). What it returns goes to :meth:`finish_post` or
        :meth:`abandon_post`, exactly once."""
        return self._begin(
            self.connections.begin_post, url, body, headers, self.settings.delivery_timeout
        )

    def begin_built(self, prefix: Prefix, request: bytes) -> Started | None:
        """:meth:`begin_post` of a request the caller built on ``prefix``
        (:meth:`CallbackConnections.begin_built`)."""
        return self._begin(
            self.connections.begin_built, prefix, request, self.settings.delivery_timeout
        )

    def _begin(self, begin: Callable[..., Started | None], *args: Any) -> Started | None:
        """``begin(*args)`` holding a delivery slot, given back unless a POST was started."""
        if not self._delivery_slots.try_take():
            return None
        started = None
        try:
            started = begin(*args)
        except CallbackFailed:
            pass
        finally:
            if started is None:
                self._delivery_slots.give()
        return started

    async def finish_post(self, started: Started) -> Answer:
        """The answer to a :meth:`begin_post`, as :meth:`post` gives it."""
        try:
            status, answer_headers = await self.connections.finish(started)
        finally:
            self._delivery_slots.give()
        return Answer(status, answer_headers)

    def abandon_post(self, started: Started) -> None:
        """A :meth:`begin_post` whose answer nobody will wait for (its worker stopped)."""
        self.connections.abandon(started)
        self._delivery_slots.give()

    async def get(self, url: str, limit: int) -> Answer:
        """A verification of intent (or denial): at most ``limit`` bytes of the body."""
        status, headers, body = await self.connections.get(
            url, {}, self.settings.verify_timeout, limit
        )
        return Answer(status, headers, body)

    async def fetch_document(self, url: str) -> bytes:
        """GET a pinged topic URL: 200 and at most ``max_body_bytes``, or 502/413."""
        return (await self._fetch(url, _PING_HEADERS)).body

    async def fetch_content(self, url: str) -> Answer:
        """GET a pinged plain WebSub topic: its 200 answer, headers and whole body (at most
        ``max_body_bytes``, unencoded: ``Accept-Encoding: identity``), or 502/413."""
        return await self._fetch(url, _CONTENT_HEADERS)

    async def _fetch(self, url: str, headers: Mapping[str, str]) -> Answer:
        """A publish ping's GET, within ``verify_timeout`` (body included), never
        redirected, on the connections every outgoing request uses (their address rules)."""
        limit = self.settings.max_body_bytes
        try:
            status, answer_headers, body = await self.connections.get(
                url, headers, self.settings.verify_timeout, limit + 1
            )
        except CallbackFailed as exc:
            raise BadGateway(f"fetching {url} for the publish ping failed: {exc}") from None
        if status != 200:
            why = " (redirects are not followed)" if 300 <= status < 400 else ""
            raise BadGateway(f"fetching {url} for the publish ping gave HTTP {status}{why}")
        if len(body) > limit:
            raise PayloadTooLarge(f"{url} is larger than the {limit}-byte publish limit")
        return Answer(status, answer_headers, body)

    async def check_address(self, url: str, *, what: str = "hub.callback") -> None:
        """400 unless ``url``'s host resolves only to addresses the hub may call.

        ``what`` names the URL in the error (the hub also fetches publish-ping URLs).
        """
        if self.settings.allow_private_callbacks:
            return
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        loop = asyncio.get_running_loop()
        try:
            # Looked up as the client will connect (IDNA2008), never through the resolver's
            # own IDNA step, whose UnicodeError was a 500 (a 3,000-character label).
            name = ascii_host(host)
            async with asyncio.timeout(5.0):  # keeps a cancel (3.11's wait_for may not)
                infos = await loop.getaddrinfo(name, port, type=socket.SOCK_STREAM)
        except (OSError, TimeoutError, UnicodeError) as exc:  # idna.IDNAError is one
            raise BadRequest(f"{what} host {host[:100]!r} does not resolve: {exc}") from None
        for info in infos:
            address = str(info[4][0])
            why = refusal(address)
            if why is not None:
                raise BadRequest(
                    f"{what} {host!r} resolves to {address}, {why}; such addresses are not "
                    "allowed on this hub (RSHUB_ALLOW_PRIVATE_CALLBACKS)"
                )


class _Slots:
    """A semaphore that can also be taken without waiting (:meth:`try_take`), as a
    delivery started in the feed's fan-out must be; first come, first served."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.free = size
        self._waiters: deque[asyncio.Future[None]] = deque()
        #: What :meth:`all_free` waits on, while something does.
        self._all_free: asyncio.Future[None] | None = None

    def try_take(self) -> bool:
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return True
        return False

    async def take(self) -> None:
        if self.try_take():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # give() hands its slot over
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give()  # handed a slot as this was cancelled: pass it on
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    def give(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.free += 1
        if self.free == self.size and self._all_free is not None:
            if not self._all_free.done():
                self._all_free.set_result(None)
            self._all_free = None

    async def all_free(self, timeout: float) -> None:
        """Wait until no slot is taken, or ``timeout`` passed."""
        if self.free >= self.size:
            return
        if self._all_free is None or self._all_free.done():
            self._all_free = asyncio.get_running_loop().create_future()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._all_free), timeout)
