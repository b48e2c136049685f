"""The subscriber's push streams against a hub that sends what is not a change event.

Whatever a stream carries (not JSON, a field missing or of the wrong kind, a bare value),
:meth:`HubStream.batches` yields the good messages before it and then raises
:class:`MalformedEvent`, a :class:`PushUnavailable`, naming the problem: the follower then
falls back to the hub's Change Lists, losing nothing. Before, ``orjson``'s or a field's
own error escaped and ended ``rshub subscribe``/``sync`` with a traceback. Named cases and
a seeded fuzz over both transports, under the watchdog; a WebSub delivery that is no change
notification is a 400, not a 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp import web

from resourcesync import Entry, Metadata, ResourceList, serialize
from subscriber.callback import CallbackReceiver
from subscriber.events import ChangeEvent
from subscriber.exceptions import MalformedEvent
from subscriber.follower import Follower
from subscriber.position import EventCursor
from subscriber.stream import HubStream
from subscriber.websub import sign
from tests.conftest import Hub
from tests.publisher.helpers import serve
from tests.support import changes, notification
from tests.watchdog import Watchdog

GOOD = {
    "id": "1-0",
    "topic": "t",
    "loc": "http://r.invalid/a",
    "lastmod": "2026-01-01T00:00:00Z",
    "change": "created",
    "hash": "md5:" + "0" * 32,
    "length": 3,
    "type": "text/plain",
}

NAMED: list[tuple[str, str]] = [
    ("not JSON", "{not json"),
    ("empty", ""),
    ("a bare number", "7"),
    ("a string", '"created"'),
    ("null", "null"),
    ("no loc", json.dumps({k: v for k, v in GOOD.items() if k != "loc"})),
    ("a number for loc", json.dumps({**GOOD, "loc": 5})),
    ("an empty loc", json.dumps({**GOOD, "loc": ""})),
    ("an unknown change", json.dumps({**GOOD, "change": "moved"})),
    ("no lastmod", json.dumps({k: v for k, v in GOOD.items() if k != "lastmod"})),
    ("a lastmod that is no time", json.dumps({**GOOD, "lastmod": "yesterday"})),
    ("a negative length", json.dumps({**GOOD, "length": -1})),
    ("a string length", json.dumps({**GOOD, "length": "3"})),
    ("a boolean length", json.dumps({**GOOD, "length": True})),
    ("a number for an id", json.dumps({**GOOD, "id": 7})),
    ("links not a list", json.dumps({**GOOD, "links": "x"})),
    ("a link not an object", json.dumps({**GOOD, "links": [1]})),
    ("an array holding a bad one", json.dumps([GOOD, {**GOOD, "change": 1}])),
]


def mutate(rng: random.Random) -> str:
    """A hub event, an array of them or a fragment, with one field or byte gone wrong."""
    event: dict[str, object] = dict(GOOD)
    field = rng.choice([*GOOD, "links", "extra"])
    event[field] = rng.choice(
        [None, 0, -5, 1.5, True, "", "x", [], {}, [1], "2026-13-01T00:00:00Z", "\u0000", "ü"]
    )
    if rng.random() < 0.3:
        del event[rng.choice(list(event))]
    text = json.dumps(rng.choice([event, [event], [GOOD, event], event.get("loc")]))
    if rng.random() < 0.3:
        cut = rng.randrange(len(text) + 1)
        text = text[:cut] + rng.choice(["", "}", "\\", '"', "\u2028", "\x00"]) + text[cut + 1 :]
    return text


def accepted(text: str) -> list[ChangeEvent] | None:
    """What the subscriber makes of ``text``, or None when it is not change events."""
    try:
        payload = json.loads(text)
        items = payload if isinstance(payload, list) else [payload]
        return [ChangeEvent.from_json(item) for item in items]
    except ValueError:
        return None


def hostile_hub(messages: list[str]) -> web.Application:
    """A hub whose SSE and WebSocket streams of topic ``t`` carry ``messages``, in order."""

    async def sse(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for n, text in enumerate(messages):
            lines = "".join(f"data: {line}\n" for line in text.split("\n"))
            await resp.write(f"id: {n + 1}-0\n{lines}\n".encode())
        return resp

    async def ws(request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        for text in messages:
            await socket.send_str(text)
        await socket.close()
        return socket

    app = web.Application()
    app.router.add_get("/topics/t/events", sse)
    app.router.add_get("/topics/t/ws", ws)
    return app


async def outcome(
    session: aiohttp.ClientSession, messages: list[str], transport: str
) -> tuple[list[ChangeEvent], MalformedEvent | None]:
    """The events a stream yields from a hub sending ``messages``, and how it ended."""
    got: list[ChangeEvent] = []
    async with serve(hostile_hub(messages)) as base:
        stream = HubStream(session, base, "t", transport=transport)  # type: ignore[arg-type]
        try:
            async for batch in stream.batches():
                got.extend(batch)
        except MalformedEvent as exc:
            return got, exc
        except Exception as exc:  # the stream's normal end: "stream ended"
            assert type(exc).__name__ in ("PushUnavailable", "StreamClosed"), repr(exc)
    return got, None


@pytest.mark.parametrize("transport", ["sse", "ws"])
@pytest.mark.parametrize("name,text", NAMED, ids=[n for n, _ in NAMED])
async def test_a_message_that_is_no_change_event_ends_push_with_its_reason(
    session: aiohttp.ClientSession, transport: str, name: str, text: str
) -> None:
    async with Watchdog() as dog:
        got, error = await outcome(session, [json.dumps(GOOD), text], transport)
    await dog.sockets_back()
    assert [e.loc for e in got] == [GOOD["loc"]], name  # what came before it is kept
    assert error is not None, name
    assert "not a change event" in str(error), str(error)


@pytest.mark.parametrize("transport", ["sse", "ws"])
async def test_fuzz_push_streams_yield_events_or_say_why_not(
    session: aiohttp.ClientSession, transport: str
) -> None:
    rng = random.Random(9152 + len(transport))
    cases = [[mutate(rng) for _ in range(rng.randint(1, 4))] for _ in range(60)]
    ended_malformed = 0
    async with Watchdog() as dog:
        for messages in cases:
            got, error = await outcome(session, messages, transport)
            # Exactly the messages before the first bad one are yielded.
            expected: list[ChangeEvent] = []
            bad = None
            for text in messages:
                events = accepted(text)
                if events is None:
                    bad = text
                    break
                expected.extend(events)
            assert [(e.loc, e.change) for e in got] == [(e.loc, e.change) for e in expected]
            assert (error is None) == (bad is None), (messages, error)
            ended_malformed += error is not None
    await dog.sockets_back()
    assert 10 < ended_malformed < len(cases)  # the seed reaches both outcomes


async def test_a_webhook_delivery_that_is_no_change_notification_is_a_400(
    session: aiohttp.ClientSession,
) -> None:
    """Signed, and a valid ResourceSync document, but its entry is no change (a Resource
    List): a 400 the hub records, where it was a 500 with a traceback."""
    receiver = CallbackReceiver(session, "http://hub.invalid", "t")
    await receiver.start()
    try:
        at = datetime(2026, 1, 1, tzinfo=UTC)
        entry = Entry(loc="http://r.invalid/a")
        body = serialize(ResourceList(md=Metadata(at=at), entries=(entry,)))
        headers = {"X-Hub-Signature": sign(receiver.secret, body)}
        async with Watchdog():
            async with session.post(receiver.callback_url, data=body, headers=headers) as resp:
                assert resp.status == 400, await resp.text()
                assert "not a change entry" in await resp.text()
    finally:
        await receiver.close()


def hostile_request(rng: random.Random, receiver: CallbackReceiver) -> dict[str, Any]:
    """A request anyone who knows (or guesses) the callback URL may send."""
    path = urlsplit(receiver.callback_url).path
    path = rng.choice([path, path, path + "x", "/websub/", "/", path + "/.."])
    values = ["subscribe", "unsubscribe", "x", "", "²", "-1", "9" * 5000, "0", "60", "é",
              receiver.topic_uri, receiver.topic_uri + "x", "\u2028", "a" * 3000]  # fmt: skip
    if rng.random() < 0.5:
        query = {
            name: rng.choice(values)
            for name in ("hub.mode", "hub.topic", "hub.challenge", "hub.lease_seconds")
            if rng.random() < 0.8
        }
        if rng.random() < 0.3:  # a verification of our subscription, its lease anything
            query.update({"hub.mode": "subscribe", "hub.topic": receiver.topic_uri})
            query.update({"hub.challenge": "c", "hub.lease_seconds": rng.choice(values)})
        return {"method": "GET", "path": path, "params": query}
    body = rng.choice(
        [b"", b"<x/>", b"\xff\xfe", b"<urlset/>" * 3, rng.randbytes(rng.randint(0, 300))]
    )
    headers = {}
    if rng.random() < 0.7:
        headers["X-Hub-Signature"] = rng.choice(
            ["", "sha256=", "sha256=00", "md5=x", "sha1=" + "0" * 40, sign(receiver.secret, body)]
        )
    return {"method": "POST", "path": path, "data": body, "headers": headers}


async def test_fuzz_the_callback_server_answers_anyone_without_a_5xx(
    session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    """Seeded fuzz of the WebSub callback server: verification GETs and deliveries with any
    query, body and signature. No 5xx and no error logged (a ``hub.lease_seconds`` of "²"
    or of 5,000 digits was a 500), nothing queued that is not a signed change, and a good
    delivery afterwards still arrives."""
    receiver = CallbackReceiver(session, "http://hub.invalid", "t")
    await receiver.start()
    # As after subscribe() (which needs a hub): verifications of it are answered, so the
    # fuzz reaches the lease it reads from them.
    receiver._wanted.add("subscribe")
    rng = random.Random(5150)
    statuses: list[int] = []
    try:
        async with Watchdog() as dog:
            # Its own client, closed before the sockets are counted: a pooled keep-alive
            # connection is no leak of the server's.
            async with aiohttp.ClientSession() as client:
                base = receiver.callback_url.split("/websub/")[0]
                for _ in range(400):
                    case = hostile_request(rng, receiver)
                    url = base + case.pop("path")
                    async with client.request(case.pop("method"), url, **case) as resp:
                        statuses.append(resp.status)
                        await resp.read()
                good = notification([{"loc": "http://r.invalid/a"}])
                headers = {"X-Hub-Signature": sign(receiver.secret, good)}
                async with client.post(receiver.callback_url, data=good, headers=headers) as r:
                    assert r.status == 204, await r.text()
            deliveries = receiver.deliveries()
            first = await asyncio.wait_for(deliveries.__anext__(), 5)
            await deliveries.aclose()
        await dog.sockets_back()
    finally:
        receiver._wanted.discard("subscribe")  # nothing to unsubscribe from: no hub
        await receiver.close()
    assert max(statuses) < 500, sorted(set(statuses))
    assert {200, 400, 404, 202} <= set(statuses)  # answered, refused and dropped alike
    assert receiver.granted_lease in (0, 60)
    assert isinstance(first, list) and [e.loc for e in first] == ["http://r.invalid/a"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


class InjectingProxy:
    """The hub behind a proxy that slips one message that is no change event into the
    first SSE or WebSocket stream, right after its first event; everything else passes
    through."""

    def __init__(self, upstream: str, session: aiohttp.ClientSession) -> None:
        self.upstream = upstream
        self.session = session
        self.injected = False
        self.app = web.Application()
        self.app.router.add_get("/topics/{name}/events", self.events)
        self.app.router.add_get("/topics/{name}/ws", self.websocket)
        self.app.router.add_get("/{path:.*}", self.passthrough)

    def _headers(self, request: web.Request) -> dict[str, str]:
        keep = ("accept", "last-event-id", "if-none-match", "if-modified-since")
        return {k: v for k, v in request.headers.items() if k.lower() in keep}

    async def events(self, request: web.Request) -> web.StreamResponse:
        timeout = aiohttp.ClientTimeout(total=None)
        url = self.upstream + request.path_qs
        async with self.session.get(url, headers=self._headers(request), timeout=timeout) as up:
            resp = web.StreamResponse(status=up.status, headers={"Content-Type": up.content_type})
            await resp.prepare(request)
            seen = b""
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
                seen += chunk
                if not self.injected and b"\nid:" in b"\n" + seen and seen.endswith(b"\n\n"):
                    self.injected = True
                    await resp.write(b"data: {not a change\n\n")
            return resp

    async def websocket(self, request: web.Request) -> web.WebSocketResponse:
        client = web.WebSocketResponse()
        url = self.upstream.replace("http", "ws", 1) + request.path_qs
        # Upstream first: the client counts as connected once it is answered.
        async with self.session.ws_connect(url, headers=self._headers(request)) as up:
            await client.prepare(request)

            async def relay() -> None:
                async for message in up:
                    if message.type != aiohttp.WSMsgType.TEXT:
                        return
                    await client.send_str(message.data)
                    if not self.injected:
                        self.injected = True
                        await client.send_str("{not a change")

            relaying = asyncio.ensure_future(relay())
            async for _message in client:  # until the client goes: then the relay ends too
                pass
            relaying.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await relaying
        return client

    async def passthrough(self, request: web.Request) -> web.Response:
        url = self.upstream + request.path_qs
        async with self.session.get(url, headers=self._headers(request)) as up:
            keep = ("Content-Type", "ETag", "Last-Modified")
            headers = {k: up.headers[k] for k in keep if k in up.headers}
            return web.Response(status=up.status, body=await up.read(), headers=headers)


@pytest.mark.parametrize("via", ["sse", "ws"])
async def test_a_malformed_push_message_loses_no_change(
    hub: Hub, session: aiohttp.ClientSession, via: str
) -> None:
    """End to end: after the hub's stream carries what is no change event, the follower
    says why, polls the hub's Change Lists, and every change arrives once."""
    modes: list[tuple[str, str]] = []
    assert (await hub.publish("m", notification(changes(1)))).status == 202  # before: not ours
    proxy = InjectingProxy(hub.url, session)
    async with serve(proxy.app) as base:
        follower = Follower(
            session,
            EventCursor(),
            hub=base,
            topic="m",
            via=via,  # type: ignore[arg-type]
            poll_interval=0.1,
            push_retry=0.5,
            on_mode=lambda mode, why: modes.append((mode, why)),
        )
        got: list[str] = []

        async def consume(n: int) -> None:
            async for event in follower.events():
                got.append(event.loc)
                if len(got) >= n:
                    return

        async with follower:  # push is connected when this returns
            await hub.publish("m", notification(changes(1, start=1)))
            await asyncio.wait_for(consume(1), 10)
            await hub.publish("m", notification(changes(2, start=2)))
            await asyncio.wait_for(consume(3), 15)
    assert proxy.injected
    assert got == [f"http://example.org/r{i}" for i in (1, 2, 3)], got
    assert any(m == "poll" and "not a change event" in why for m, why in modes), modes
