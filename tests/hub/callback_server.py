"""A real WebSub subscriber endpoint on 127.0.0.1 for tests, with scriptable behaviour."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from resourcesync import parse
from tests.support import free_port


@dataclass
class Delivery:
    body: bytes
    headers: dict[str, str]
    ids: list[str]
    locs: list[str]


@dataclass
class CallbackServer:
    """Records verifications and deliveries; ``statuses`` scripts the delivery answers."""

    echo_challenge: bool = True
    #: Answers to give to the next deliveries, in order (then 200 forever).
    statuses: list[int] = field(default_factory=list)
    #: Seconds each delivery takes to answer (a batch stays in flight that long).
    delay: float = 0.0
    #: Set: each delivery waits for it before it answers (held for as long as a test needs,
    #: where a fixed ``delay`` would race a busy machine).
    gate: asyncio.Event | None = None
    #: Deliveries are change notifications, parsed and checked (False: a plain WebSub
    #: topic's content, kept as it came).
    notifications: bool = True
    verifications: list[dict[str, str]] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    #: The client certificate (``ssl.getpeercert()``) of each delivery, None without one.
    peer_certs: list[Any] = field(default_factory=list)
    refused: int = 0
    url: str = ""
    _runner: web.AppRunner | None = None

    @property
    def ids(self) -> list[str]:
        return [i for d in self.deliveries for i in d.ids]

    @property
    def locs(self) -> list[str]:
        return [loc for d in self.deliveries for loc in d.locs]

    async def _verify(self, request: web.Request) -> web.Response:
        self.verifications.append(dict(request.query))
        if request.query.get("hub.mode") == "denied":
            return web.Response(text="ok")
        if not self.echo_challenge:
            return web.Response(text="nope")
        return web.Response(text=request.query["hub.challenge"])

    async def _deliver(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.gate is not None:
            await self.gate.wait()
        if request.transport is not None:  # the client certificate of an mTLS connection
            self.peer_certs.append(request.transport.get_extra_info("peercert"))
        if self.statuses:
            status = self.statuses.pop(0)
            if status >= 300:
                self.refused += 1
                return web.Response(status=status)
        if not self.notifications:
            self.deliveries.append(Delivery(body, dict(request.headers), [], []))
            return web.Response(status=204)
        doc = parse(body)
        ids = [e.md.extra["{urn:rshub:1}id"] for e in doc.entries]  # type: ignore[union-attr]
        assert request.headers["X-RSHub-First-Event-Id"] == ids[0]
        assert request.headers["X-RSHub-Last-Event-Id"] == ids[-1]
        assert request.headers["X-RSHub-Event-Count"] == str(len(ids))
        self.deliveries.append(
            Delivery(body, dict(request.headers), ids, [e.loc for e in doc.entries])
        )
        return web.Response(status=204)

    async def start(
        self, path: str = "/cb", *, ssl_context: ssl.SSLContext | None = None, port: int = 0
    ) -> CallbackServer:
        """Serve on 127.0.0.1 (``port``, or a free one); https with ``ssl_context``."""
        app = web.Application()
        app.router.add_get(path, self._verify)
        app.router.add_post(path, self._deliver)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        port = port or free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port, ssl_context=ssl_context).start()
        self.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}{path}"
        return self

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    def signature_ok(self, secret: str) -> Iterator[bool]:
        for d in self.deliveries:
            expected = "sha256=" + hmac.new(secret.encode(), d.body, hashlib.sha256).hexdigest()
            yield hmac.compare_digest(d.headers.get("X-Hub-Signature", ""), expected)
