"""The subscriber's stream of several topics against a hub that sends what is no message of
such a stream: each connection yields the good messages before it, then raises
:class:`MalformedEvent` naming the problem (the command then reconnects after a back-off,
saying why), never another error. Named cases and a seeded fuzz over both transports, under
the watchdog."""

from __future__ import annotations

import json
import random
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from subscriber.exceptions import MalformedEvent, PushUnavailable
from subscriber.topics_stream import Delivery, TopicsStream
from tests.publisher.helpers import serve
from tests.watchdog import Watchdog

EVENT = {
    "id": "1-0",
    "topic": "t",
    "loc": "http://r.invalid/a",
    "lastmod": "2026-01-01T00:00:00Z",
    "change": "created",
}
GOOD_WS = json.dumps({"id": "m1.AAA", "events": [EVENT]})
GOOD_SSE = f"id: m1.AAA\ndata: {json.dumps(EVENT)}\n\n"

NAMED_WS: list[tuple[str, str]] = [
    ("not JSON", "{not json"),
    ("a bare list", json.dumps([EVENT])),
    ("no id", json.dumps({"events": [EVENT]})),
    ("an empty id", json.dumps({"id": "", "events": []})),
    ("a number for the id", json.dumps({"id": 7, "events": []})),
    ("no events", json.dumps({"id": "m1.B"})),
    ("events not a list", json.dumps({"id": "m1.B", "events": EVENT})),
    (
        "an event without its topic",
        json.dumps({"id": "m1.B", "events": [{**EVENT, "topic": None}]}),
    ),
    ("a bad change", json.dumps({"id": "m1.B", "events": [{**EVENT, "change": "moved"}]})),
    ("topic_deleted not a name", json.dumps({"id": "m1.B", "events": [], "topic_deleted": 5})),
    ("topic_deleted empty", json.dumps({"id": "m1.B", "events": [], "topic_deleted": ""})),
]
NAMED_SSE: list[tuple[str, str]] = [
    ("data not JSON", "id: m1.B\ndata: {not json\n\n"),
    ("an event without its topic", f"id: m1.B\ndata: {json.dumps({**EVENT, 'topic': None})}\n\n"),
    ("a bare list", f"id: m1.B\ndata: {json.dumps([EVENT])}\n\n"),
    ("topic-deleted without a topic", "event: topic-deleted\nid: m1.B\ndata: {}\n\n"),
    ("topic-deleted not JSON", "event: topic-deleted\nid: m1.B\ndata: t\n\n"),
]


def hostile_hub(messages: list[str]) -> web.Application:
    """A hub whose streams of several topics carry ``messages`` (WebSocket texts, or SSE
    blocks as they are), in order, then end."""

    async def sse(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for block in messages:
            await resp.write(block.encode())
        return resp

    async def ws(request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        for text in messages:
            await socket.send_str(text)
        await socket.close()
        return socket

    app = web.Application()
    app.router.add_get("/events", sse)
    app.router.add_get("/ws", ws)
    return app


async def outcome(
    session: aiohttp.ClientSession, messages: list[str], transport: Any
) -> tuple[list[Delivery], PushUnavailable | None]:
    """What one connection to a hub sending ``messages`` yields, and how it ended (None:
    its end, an SSE response's)."""
    got: list[Delivery] = []
    async with serve(hostile_hub(messages)) as base:
        stream = TopicsStream(session, base, topics=["t", "u"], prefixes=[], transport=transport)
        try:
            async for delivery in stream.connection():
                got.append(delivery)
        except PushUnavailable as exc:  # MalformedEvent, or the end of the connection
            return got, exc
    return got, None


@pytest.mark.parametrize(("name", "text"), NAMED_WS, ids=[n for n, _ in NAMED_WS])
async def test_a_websocket_message_that_is_none_of_the_streams_ends_it_with_its_reason(
    session: aiohttp.ClientSession, name: str, text: str
) -> None:
    async with Watchdog() as dog:
        got, error = await outcome(session, [GOOD_WS, text], "ws")
    await dog.sockets_back()
    assert [(d.resume_id, [e.loc for e in d.events]) for d in got] == [
        ("m1.AAA", [EVENT["loc"]])
    ], name
    assert isinstance(error, MalformedEvent), (name, error)


@pytest.mark.parametrize(("name", "block"), NAMED_SSE, ids=[n for n, _ in NAMED_SSE])
async def test_an_sse_event_that_is_none_of_the_streams_ends_it_with_its_reason(
    session: aiohttp.ClientSession, name: str, block: str
) -> None:
    async with Watchdog() as dog:
        got, error = await outcome(session, [GOOD_SSE, block], "sse")
    await dog.sockets_back()
    assert [e.loc for d in got for e in d.events] == [EVENT["loc"]], name
    assert all(d.resume_id == "m1.AAA" for d in got), got
    assert isinstance(error, MalformedEvent), (name, error)


def mutate(rng: random.Random) -> dict[str, Any]:
    message: dict[str, Any] = {"id": "m1.C", "events": [dict(EVENT)]}
    if rng.random() < 0.3:
        message["topic_deleted"] = "t"
        message["events"] = []
    where = rng.choice(["id", "events", "topic_deleted", "event"])
    value = rng.choice([None, 0, -5, 1.5, True, "", "x", [], {}, [1], "\u0000", "ü"])
    if where == "event" and message["events"]:
        message["events"][0][rng.choice([*EVENT, "extra"])] = value
    else:
        message[where] = value
    if rng.random() < 0.2:
        del message[rng.choice(list(message))]
    return message


@pytest.mark.parametrize("transport", ["ws", "sse"])
async def test_fuzz_a_stream_of_several_topics_yields_messages_or_says_why_not(
    session: aiohttp.ClientSession, transport: str
) -> None:
    rng = random.Random(5107 + len(transport))
    malformed = 0
    async with Watchdog() as dog:
        for _ in range(60):
            message = mutate(rng)
            text = json.dumps(message)
            if transport == "sse":  # the same fields as an SSE event
                if "topic_deleted" in message:
                    deleted = json.dumps({"topic": message["topic_deleted"]})
                    text = f"event: topic-deleted\nid: m1.C\ndata: {deleted}\n\n"
                else:
                    events = message.get("events")
                    first = events[0] if isinstance(events, list) and events else events
                    text = f"id: m1.C\ndata: {json.dumps(first)}\n\n"
                if rng.random() < 0.3:  # a byte gone wrong
                    cut = rng.randrange(len(text))
                    text = text[:cut] + rng.choice(["", "\r", "\n", "\x00", "}"]) + text[cut + 1 :]
            got, error = await outcome(session, [text], transport)
            for delivery in got:  # what was yielded is whole
                assert isinstance(delivery.resume_id, str) and delivery.resume_id
                assert all(isinstance(e.topic, str) for e in delivery.events)
                assert delivery.deleted is None or isinstance(delivery.deleted, str)
            assert error is None or isinstance(error, PushUnavailable), repr(error)
            malformed += isinstance(error, MalformedEvent)
    await dog.sockets_back()
    assert 10 < malformed < 60  # the seed reaches both outcomes
