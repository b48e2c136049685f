"""The hub's outgoing HTTP: WebSub verification, deliveries and ping fetches.

Deliveries go through :class:`hub.live.callback_connections.CallbackConnections` (the hot path,
with the same address checks); verification and ping fetches through aiohttp.

Never follows redirects, bounds every request in time, and reads at most the bytes asked
for. Unless private callbacks are allowed, every socket is checked against the address it is
about to connect to (:func:`public_socket`): the check sits where the connection is made, so
it covers verifications, deliveries and ping fetches, IP literals as well as names, and a
name whose DNS answer changes after the subscribe-time check (DNS rebinding). Failures before
an HTTP answer become :class:`CallbackFailed`, the one error :mod:`hub.live.delivery` handles.
"""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Mapping
from urllib.parse import urlsplit

import aiohttp

from hub.core.addresses import refusal
from hub.core.exceptions import BadGateway, BadRequest, CallbackFailed, PayloadTooLarge
from hub.core.settings import Settings
from hub.live.callback_connections import CallbackConnections, tls_context
from hub.live.delivery import Answer


class RefusedAddress(OSError):
    """The hub will not connect to this address (SSRF rules, :mod:`hub.core.addresses`)."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EACCES, message)  # aiohttp reports strerror


AddrInfo = tuple[int, int, int, str, tuple[str, int] | tuple[str, int, int, int]]


def public_socket(addr_info: AddrInfo) -> socket.socket:
    """aiohttp's socket factory: a socket for ``addr_info`` only if its address is public."""
    family, type_, proto, _, sockaddr = addr_info
    why = refusal(str(sockaddr[0]))
    if why is not None:
        raise RefusedAddress(
            f"refusing to connect to {sockaddr[0]}: {why} (RSHUB_ALLOW_PRIVATE_CALLBACKS)"
        )
    return socket.socket(family=family, type=type_, proto=proto)


class HttpClient:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        #: Deliveries in flight. A delivery's timeout starts once it has a slot: with the
        #: limit on the connector instead, time queued for a connection counted against
        #: the timeout, so a burst to many callbacks failed deliveries that never left.
        self._delivery_slots = asyncio.Semaphore(settings.delivery_concurrency)
        #: One TLS context for deliveries and verifications (RSHUB_CALLBACK_CA_FILE, ...).
        tls = tls_context(
            settings.callback_ca_file, settings.callback_client_cert, settings.callback_client_key
        )
        connector = aiohttp.TCPConnector(
            limit=0,
            limit_per_host=0,
            socket_factory=None if settings.allow_private_callbacks else public_socket,
            ssl=tls,
        )
        self.session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=settings.delivery_timeout),
            auto_decompress=False,
        )
        self.deliveries = CallbackConnections(
            allow_private=settings.allow_private_callbacks,
            max_idle_per_origin=settings.delivery_concurrency,
            tls=tls,
        )
        self._verify_timeout = aiohttp.ClientTimeout(total=settings.verify_timeout)

    async def close(self) -> None:
        await self.deliveries.close()
        await self.session.close()

    async def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Answer:
        """A delivery, on :class:`CallbackConnections` rather than aiohttp (see there why)."""
        async with self._delivery_slots:
            status, answer_headers = await self.deliveries.post(
                url, body, headers, self.settings.delivery_timeout
            )
        return Answer(status, answer_headers)

    async def get(self, url: str, limit: int) -> Answer:
        try:
            async with self.session.get(
                url, allow_redirects=False, timeout=self._verify_timeout
            ) as resp:
                headers = {name.lower(): value for name, value in resp.headers.items()}
                return Answer(resp.status, headers, await resp.content.read(limit))
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise CallbackFailed(f"{type(exc).__name__}: {exc}") from None

    async def fetch_document(self, url: str) -> bytes:
        """GET a pinged topic URL: 200 and at most ``max_body_bytes``, or 502/413."""
        limit = self.settings.max_body_bytes
        try:
            async with self.session.get(
                url,
                allow_redirects=False,
                timeout=self._verify_timeout,
                headers={"Accept": "application/xml"},
            ) as resp:
                if resp.status != 200:
                    raise BadGateway(f"fetching {url} for the publish ping gave HTTP {resp.status}")
                body = await resp.content.read(limit + 1)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise BadGateway(f"fetching {url} for the publish ping failed: {exc!r}") from None
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
