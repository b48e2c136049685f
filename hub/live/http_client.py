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
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from hub.core.addresses import refusal
from hub.core.exceptions import BadGateway, BadRequest, CallbackFailed, PayloadTooLarge
from hub.core.settings import Settings
from hub.core.tasks import Tasks
from hub.live.callback_connections import CallbackConnections, tls_context

_PING_HEADERS = {"Accept": "application/xml"}


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
        self._delivery_slots = asyncio.Semaphore(settings.delivery_concurrency)
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

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Answer:
        """A delivery: the answer's status and headers (its body is skipped)."""
        async with self._delivery_slots:
            status, answer_headers = await self.connections.post(
                url, body, headers, self.settings.delivery_timeout
            )
        return Answer(status, answer_headers)

    async def get(self, url: str, limit: int) -> Answer:
        """A verification of intent (or denial): at most ``limit`` bytes of the body."""
        status, headers, body = await self.connections.get(
            url, {}, self.settings.verify_timeout, limit
        )
        return Answer(status, headers, body)

    async def fetch_document(self, url: str) -> bytes:
        """GET a pinged topic URL: 200 and at most ``max_body_bytes``, or 502/413."""
        limit = self.settings.max_body_bytes
        try:
            status, _, body = await self.connections.get(
                url, _PING_HEADERS, self.settings.verify_timeout, limit + 1
            )
        except CallbackFailed as exc:
            raise BadGateway(f"fetching {url} for the publish ping failed: {exc}") from None
        if status != 200:
            raise BadGateway(f"fetching {url} for the publish ping gave HTTP {status}")
        if len(body) > limit:
            raise PayloadTooLarge(f"{url} is larger than the {limit}-byte publish limit")
        return body

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
            infos = await asyncio.wait_for(
                loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), 5.0
            )
        except (OSError, TimeoutError) as exc:
            raise BadRequest(f"{what} host {host!r} does not resolve: {exc}") from None
        for info in infos:
            address = str(info[4][0])
            why = refusal(address)
            if why is not None:
                raise BadRequest(
                    f"{what} {host!r} resolves to {address}, {why}; such addresses are not "
                    "allowed on this hub (RSHUB_ALLOW_PRIVATE_CALLBACKS)"
                )
