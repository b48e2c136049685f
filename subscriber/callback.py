"""A WebSub callback receiver: subscribes at the hub and turns deliveries into events.

:class:`CallbackReceiver` runs a small aiohttp server (127.0.0.1 by default; give
``callback_url`` when the hub reaches it through another address), then:

- subscribes with a random secret and ``hub.since`` (rshub extension) when resuming, and
  the rshub extensions it was given: ``hub.signature``, ``hub.filter.*``,
  ``hub.rate_limit``;
- answers verification GETs only for the topic and the modes it asked for (WebSub §5.3),
  echoing ``hub.challenge``; anything else gets 404;
- checks the signature (``X-Hub-Signature``, or Standard Webhooks with its timestamp
  tolerance: :mod:`subscriber.signatures`) in constant time; a delivery without a valid
  one is acknowledged (WebSub §8 allows it, to stop probing) but dropped and counted;
- reads each entry's event id from its ``rs:md/@rshub:id`` (or at least the delivery's
  ``X-RSHub-Last-Event-Id``), so the caller can de-duplicate and resume; marks the events
  of a dead-letter replay (``X-RSHub-Replay: dead-letter``) ``replayed``;
- reads a gap notice (the hub trimmed changes before delivering them) from the signed body
  (``rs:md/@rshub:trimmed-through``, ``rs:ln rel="resourcelist"``), never from the
  unsigned ``X-RSHub-Gap`` header alone: :meth:`CallbackReceiver.deliveries` yields it as a
  :class:`~subscriber.events.Gap` before the delivery's changes;
- renews the lease at 80 % of what the hub granted;
- unsubscribes in :meth:`close`;
- sends ``token`` (a private topic's read token) with each (un)subscription request.

Deliveries are acknowledged once queued (at most ``queue_size`` batches); the hub retries
what it could not deliver, so a repeat may arrive: callers de-duplicate by event id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncGenerator
from dataclasses import replace

import aiohttp
from aiohttp import web

from resourcesync import ChangeDumpNotification, DocumentError, parse
from rsclient.client_faults import install_client_fault_filter
from rsclient.subscription_identity import signed_headers, subscription_id

from .events import ChangeEvent, Gap
from .exceptions import ChangesTrimmed, HubRefused, PushUnavailable
from .filters import ChangeFilter
from .refusal import error_message, refusal
from .signatures import DEFAULT_TOLERANCE, Scheme, new_secret, verify
from .websub import subscription_form, verification_answer

__all__ = ["CallbackReceiver"]

log = logging.getLogger(__name__)

#: Seconds between questions to the hub about a verification that has not come (more
#: than one: a signature is per second and the hub accepts each once).
_ASK_EVERY = 1.2

LAST_ID_HEADER = "X-RSHub-Last-Event-Id"
#: Marks an operator's replay of dead letters: older events, judged per resource.
REPLAY_HEADER = "X-RSHub-Replay"
#: The hub's per-entry event id: an extension attribute of ``rs:md``.
ID_ATTRIBUTE = "{urn:rshub:1}id"
#: A delivery's gap notice: an extension attribute of the root ``rs:md``.
TRIMMED_ATTRIBUTE = "{urn:rshub:1}trimmed-through"


class CallbackReceiver:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        hub: str,
        topic: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        callback_url: str | None = None,
        lease_seconds: int = 3600,
        verify_timeout: float = 10.0,
        queue_size: int = 100,
        max_body: int = 64 * 2**20,
        signature: Scheme = "websub",
        event_filter: ChangeFilter | None = None,
        rate_limit: str | None = None,
        tolerance: float = DEFAULT_TOLERANCE,
        token: str | None = None,
    ) -> None:
        """``signature``: the scheme the hub is asked to sign with; ``tolerance``: how far
        (seconds) a Standard Webhooks timestamp may be off; ``event_filter``: the changes
        the hub sends (``hub.filter.*``); ``rate_limit``: ``hub.rate_limit``; ``token``:
        the topic's read token, if it is private."""
        self.session = session
        self.hub = hub.rstrip("/")
        self.topic = topic
        self.topic_uri = f"{self.hub}/topics/{topic}"
        self.host = host
        self.port = port
        self._callback_url = callback_url
        self.lease_seconds = lease_seconds
        self.verify_timeout = verify_timeout
        self.signature: Scheme = signature
        self.secret = new_secret(signature)
        self.event_filter = event_filter
        self.rate_limit = rate_limit
        self.tolerance = tolerance
        self._authorization = {"Authorization": f"Bearer {token}"} if token else {}
        self._path = f"/websub/{secrets.token_urlsafe(16)}"
        self._queue: asyncio.Queue[list[ChangeEvent] | Gap | PushUnavailable] = asyncio.Queue(
            queue_size
        )
        self._max_body = max_body
        self._wanted: set[str] = set()
        self._verified: dict[str, asyncio.Event] = {}
        self._denied: str | None = None
        self._runner: web.AppRunner | None = None
        self._renewal: asyncio.Task[None] | None = None
        #: Deliveries dropped because their signature was missing or wrong.
        self.rejected = 0
        #: Lease the hub granted in its last verification.
        self.granted_lease: int | None = None

    @property
    def callback_url(self) -> str:
        if self._callback_url is None:
            raise RuntimeError("call start() first")
        return self._callback_url

    async def start(self) -> None:
        """Start listening (does not subscribe yet)."""
        install_client_fault_filter()  # anyone may send it an over-long URL: not an ERROR
        app = web.Application(client_max_size=self._max_body)
        app.router.add_get(self._path, self._verify)
        app.router.add_post(self._path, self._deliver)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        # Cancelled inside ``loop.create_server`` (its last step yields once), the server
        # already listens but ``site`` never learns of it: a socket nobody closes. So the
        # start runs to its end, and a cancelled start stops what it started.
        starting = asyncio.ensure_future(site.start())
        try:
            await asyncio.shield(starting)
        except BaseException:
            with contextlib.suppress(BaseException):
                await starting
            await self._runner.cleanup()
            self._runner = None
            raise
        if self._callback_url is None:
            port = self._runner.addresses[0][1]
            self._callback_url = f"http://{self.host}:{port}{self._path}"
        elif not self._callback_url.endswith(self._path):
            self._callback_url = self._callback_url.rstrip("/") + self._path

    async def subscribe(self, since: str | None = None) -> None:
        """Subscribe and wait until the hub verified it.

        Raises:
            PushUnavailable: the hub is unreachable, refused, denied, or never verified.
        """
        await self._request("subscribe", since=since)
        if self._renewal is None or self._renewal.done():
            self._renewal = asyncio.create_task(self._renew())

    async def unsubscribe(self, timeout: float | None = None) -> None:
        """Unsubscribe and wait (``timeout``, default ``verify_timeout``) for the hub to
        verify it. A subscribe verification still in flight is refused from now on: the
        hub verifies requests concurrently, and confirming it would revive the lease."""
        if self._renewal is not None:
            self._renewal.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewal
            self._renewal = None
        self._wanted.discard("subscribe")
        await self._request("unsubscribe", timeout=timeout)

    async def close(self, timeout: float = 1.2) -> None:
        """Unsubscribe, waiting at most ``timeout`` s for the hub's verification (the
        callback server answers it, so it stops only then), and stop listening."""
        if "subscribe" in self._wanted:
            try:
                await self.unsubscribe(timeout)
            except (PushUnavailable, HubRefused) as exc:
                log.warning("unsubscribe failed: %s", exc)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def batches(self) -> AsyncGenerator[list[ChangeEvent], None]:
        """Delivered batches, in the order the hub sent them.

        Raises:
            ChangesTrimmed: the hub lost changes before delivering them (a gap notice); use
                :meth:`deliveries` to re-baseline and go on instead.
        """
        async for item in self.deliveries():
            if isinstance(item, Gap):
                raise ChangesTrimmed(item.trimmed_through, item.resourcelist)
            yield item

    async def deliveries(self) -> AsyncGenerator[list[ChangeEvent] | Gap, None]:
        """Delivered batches and gap notices, in the order the hub sent them."""
        while True:
            item = await self._queue.get()
            if isinstance(item, PushUnavailable):
                raise item
            yield item

    async def _request(
        self, mode: str, since: str | None = None, timeout: float | None = None
    ) -> None:
        verified = asyncio.Event()
        self._verified[mode] = verified
        self._wanted.add(mode)
        self._denied = None
        form = subscription_form(
            mode,
            topic=self.topic_uri,
            callback=self.callback_url,
            secret=self.secret,
            lease_seconds=self.lease_seconds,
            since=since,
            signature=None if self.signature == "websub" else self.signature,
            rate_limit=self.rate_limit,
        )
        fields = list(form.items())
        if mode == "subscribe" and self.event_filter is not None:
            fields += self.event_filter.fields("hub.filter.change", "hub.filter.prefix")
        try:
            async with self.session.post(
                f"{self.hub}/", data=fields, headers=self._authorization
            ) as resp:
                if refusal(resp.status):
                    # Never subscribed: nothing for close() to unsubscribe.
                    self._wanted.discard(mode)
                    raise HubRefused(resp.status, f"{mode}: {await error_message(resp)}")
                text = await resp.text()
                if resp.status >= 300:
                    raise PushUnavailable(f"hub refused {mode}: HTTP {resp.status} {text}")
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel
            # that lands as its awaitable finishes (SIGINT just as the hub verifies).
            async with asyncio.timeout(timeout or self.verify_timeout):
                await self._await_verification(mode, verified, time.time())
        except (aiohttp.ClientError, OSError) as exc:
            if isinstance(exc, aiohttp.ClientConnectorError):
                self._wanted.discard(mode)  # never sent: nothing for close() to undo
            raise PushUnavailable(f"cannot reach hub for {mode}: {exc}") from exc
        except TimeoutError:
            raise PushUnavailable(
                f"hub did not verify {mode} within {timeout or self.verify_timeout:.1f}s"
            ) from None
        finally:
            if mode == "unsubscribe":
                self._wanted.difference_update(("subscribe", "unsubscribe"))
        if self._denied is not None:
            self._wanted.discard(mode)
            raise PushUnavailable(f"hub denied {mode}: {self._denied}")

    async def _await_verification(self, mode: str, verified: asyncio.Event, sent: float) -> None:
        """Wait until the hub verified ``mode``; while waiting, ask the hub now and then
        whether its verification failed (a GET of the subscription's record, signed with
        our ``hub.secret``) and raise :class:`PushUnavailable` with its reason if so: it
        was only in the hub's log, and the command waited out its timeout saying nothing
        but that."""
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(_ASK_EVERY):
                    await verified.wait()
                    return
            reason = await self._verification_failure(sent)
            if reason is not None and not verified.is_set():
                raise PushUnavailable(f"hub could not verify {mode}: {reason}")

    async def _verification_failure(self, since: float) -> str | None:
        """The hub's reason for a verification of ours that failed after ``since``."""
        if self.secret is None:
            return None
        path = f"/admin/subscriptions/{subscription_id(self.topic, self.callback_url)}"
        # Signatures are per second and accepted once: a new second for each question.
        headers = signed_headers(self.secret, int(time.time()), path)
        try:
            async with self.session.get(
                self.hub + path, headers=headers, timeout=aiohttp.ClientTimeout(total=5)
            ) as resp:
                body = await resp.json(content_type=None) if resp.status in (200, 404) else None
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
            return None
        failed = body.get("failed_verification") if isinstance(body, dict) else None
        if not isinstance(failed, dict) or not isinstance(failed.get("at"), int | float):
            return None
        return str(failed.get("reason")) if failed["at"] >= since - 1 else None

    async def _renew(self) -> None:
        while True:
            lease = self.granted_lease or self.lease_seconds
            await asyncio.sleep(max(1.0, lease * 0.8))
            try:
                await self._request("subscribe")
            except PushUnavailable as exc:
                log.warning("lease renewal failed: %s", exc)
                await self._queue.put(exc)
                return

    async def _verify(self, request: web.Request) -> web.Response:
        query = request.query
        if query.get("hub.mode") == "denied" and query.get("hub.topic") == self.topic_uri:
            self._denied = query.get("hub.reason", "no reason given")
            for event in self._verified.values():
                event.set()
            return web.Response(text="")
        challenge = verification_answer(query, topic=self.topic_uri, wanted=self._wanted)
        if challenge is None:
            return web.Response(status=404, text="no such subscription request")
        mode = query["hub.mode"]
        lease = query.get("hub.lease_seconds", "")
        # ASCII digits, and few: "²" is a digit to isdigit() and 5,000 digits are past
        # int()'s limit, each a ValueError (a 500) before.
        if mode == "subscribe" and lease.isascii() and lease.isdigit() and len(lease) <= 12:
            self.granted_lease = int(lease)
        waiter = self._verified.get(mode)
        if waiter is not None:
            waiter.set()
        return web.Response(text=challenge, content_type="text/plain")

    async def _deliver(self, request: web.Request) -> web.Response:
        body = await request.read()
        if not verify(
            self.signature, (self.secret,), request.headers, body, tolerance=self.tolerance
        ):
            self.rejected += 1
            log.warning(
                "dropped a delivery with a missing, stale or wrong %s signature", self.signature
            )
            return web.Response(status=202)
        try:
            doc = parse(body)
        except DocumentError as exc:
            log.warning("dropped an unreadable delivery: %s", exc)
            return web.Response(status=400, text=str(exc))
        ids: list[str | None] = [
            e.md.extra.get(ID_ATTRIBUTE) if e.md is not None else None for e in doc.entries
        ]
        if None in ids:
            last = request.headers.get(LAST_ID_HEADER)
            unknown: list[str | None] = [None] * (len(doc.entries) - 1)
            ids = [*unknown, last] if doc.entries else []
        try:
            batch = [
                ChangeEvent.from_entry(entry, id=event_id, topic=self.topic)
                for entry, event_id in zip(doc.entries, ids, strict=True)
                # A changedump-notification's packages change no one resource: taken (a
                # 4xx would have the hub retry them), and gone past.
                if not isinstance(doc, ChangeDumpNotification)
            ]
        except ValueError as exc:  # an entry without a change or a time: a 500, once
            log.warning("dropped a delivery that is not a change notification: %s", exc)
            return web.Response(status=400, text=str(exc))
        if request.headers.get(REPLAY_HEADER) == "dead-letter":
            # Not signed: at worst an old event is considered, and judged per resource.
            batch = [replace(e, replayed=True) for e in batch]
        trimmed = doc.md.extra.get(TRIMMED_ATTRIBUTE)
        if trimmed:
            resourcelist = next((ln.href for ln in doc.links if ln.rel == "resourcelist"), None)
            log.warning("the hub trimmed changes through %s before delivering them", trimmed)
            await self._queue.put(Gap(trimmed, resourcelist))
        if batch:
            await self._queue.put(batch)
        return web.Response(status=204)
