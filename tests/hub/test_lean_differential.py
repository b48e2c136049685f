"""The lean paths against aiohttp's: the same bytes to two hubs, compared answer for answer.

Plain publishes and SSE subscribes are served by the lean paths (hub.web.lean_connection,
on by default), everything else by aiohttp on the same socket. The lean paths promise to
answer exactly as aiohttp would, or to leave the request to it. This module holds them to
it: two hubs, alike but for ``lean_publish``/``lean_sse`` (the second has both off, so
aiohttp serves every request), each on its own Redis, get the same byte sequences on raw
connections, and every difference in what comes back is a failure unless :data:`KNOWN`
lists it with its reason.

Compared for each case (:class:`Seen`): every response's status line, headers (but
:data:`EXCLUDED`) and body (dechunked; event ids, which are each hub's clock, written as
``ID``); bytes after the last whole response; whether the hub closed the connection within
the case's window or kept it; for a timed case, when the first answer came (within
:func:`_timing_slack`); for a stream, what its subscriber sees first, and with ``live``,
the event a publish then brings. At the end of each test, what each hub stored: every
topic's event stream, entry for entry, ids as positions.

The cases: named ones (:func:`_named`), each case a topic of its own, and a seeded
mutator (:func:`_mutated`) of plain publishes and subscribes, 1,000+ per path.
One hub of each kind serves the whole module, and cases run concurrently; a case found
different is run again alone (twice at most) before it counts, so that a loaded machine's
late answer is not taken for a difference.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
import os
import random
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from aiohttp import web

from hub.core.settings import Settings
from hub.store import keys
from hub.store.embedded_redis import EmbeddedRedis
from hub.web.app import _GUARD
from hub.web.listener import _BEGAN_KEPT
from tests.conftest import start_hub
from tests.support import TIME_SCALE, changes, free_port, notification

pytestmark = pytest.mark.asyncio(loop_scope="module")

#: Short deadlines, so that a stalled request is answered within a case's window.
_HEADER_TIMEOUT = 0.5
_BODY_TIMEOUT = 0.5
_SETTINGS: dict[str, Any] = {
    "host": "127.0.0.1",
    # The same public URL on both hubs: documents and messages that name it are alike.
    "base_url": "http://127.0.0.1:8080",
    "header_timeout_seconds": _HEADER_TIMEOUT,
    "body_timeout_seconds": _BODY_TIMEOUT,
    "keepalive_timeout_seconds": 30.0,
    "heartbeat_seconds": 60,
    "max_body_bytes": 48 * 1024,
    # Larger publishes are parsed off the loop: aiohttp's path on both hubs.
    "parse_inline_bytes": 16 * 1024,
    "topic_read_tokens": {"secret": ["r1"]},
}


def _quiet() -> float:
    """How long a case waits for more once what came is whole answers (a kept connection
    is one that stays open this long); taken when used, with the test's load factor."""
    return 0.25 * TIME_SCALE


def _cap() -> float:
    """How long a case waits for anything at all (taken when used, as :func:`_quiet`)."""
    return 3.0 * TIME_SCALE


def _timing_slack() -> float:
    """How far apart a timed case's first answers may come (the loop's turn, a busy
    machine; taken when used, as :func:`_quiet`)."""
    return 0.3 * TIME_SCALE


#: Cases run at once (each on both hubs at once).
_CONCURRENCY = 16

#: Response headers not compared, and why. Every other header is compared, in order.
EXCLUDED: dict[bytes, str] = {
    b"date": "the clock at the answer",
    b"content-length": (
        "sizes a body that holds event ids, which are each hub's clock (its sequence part "
        "varies in length): the body is compared with its ids written as ID, and framed by "
        "this length on each side"
    ),
}
#: A request id the hub makes itself (the client sent none it takes): random per request.
_MADE_ID = re.compile(rb"[0-9a-f]{16}")
#: An event id (milliseconds-sequence): each hub's clock.
_EVENT_ID = re.compile(rb"\b\d{13}-\d+\b")
#: A stream of several topics' resume id: positions on each hub's clock.
_RESUME_ID = re.compile(rb"m1\.[A-Za-z0-9_-]+")

_SLOW_HEAD = "a body that stalls after a slow head"
#: Differences found and accepted: case name (a named case, or ``publish-fuzz``/
#: ``sse-fuzz`` for a mutated one's kind) -> the reason.
KNOWN: dict[str, str] = {
    _SLOW_HEAD: (
        "the body deadline runs from the request's first byte where the hub sees it: the "
        "lean connection sees it and hands it on (408 at the deadline on both of the "
        "lean hub's paths), but aiohttp's parser tells the hub of a request only once its "
        "head is complete, so on a hub without the lean paths a head that took 0.4 s "
        "moves the 408 by as much (the header deadline bounds that)"
    ),
}


@dataclass(frozen=True)
class Answer:
    status: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    #: Its body whole (a sized one, or a chunked one up to its last chunk).
    whole: bool


@dataclass(frozen=True)
class Seen:
    answers: tuple[Answer, ...]
    #: Bytes after the last whole response (a response cut short).
    rest: bytes
    closed: bool
    #: Seconds from the first byte sent to the first byte answered (None: no answer).
    first: float | None = field(compare=False)


@dataclass(frozen=True)
class Case:
    name: str
    #: Written in order, ``pause`` seconds apart.
    pieces: tuple[bytes, ...]
    pause: float = 0.0
    #: Requests each hub gets first, each on a connection of its own, answers not compared
    #: (a publish a resume point then finds, say).
    before: tuple[bytes, ...] = ()
    #: Compare when the first answer came.
    timed: bool = False
    #: A publish sent on another connection once the case's answers are in (an SSE case:
    #: what its subscriber then sees).
    live: bytes | None = None


@dataclass
class Side:
    port: int
    app: web.Application
    redis: aioredis.Redis


@dataclass
class Hubs:
    lean: Side
    plain: Side


# -- the hubs -----------------------------------------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def hubs(
    redis_server: EmbeddedRedis, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Hubs]:
    """A hub with the lean paths (the session's Redis, emptied) and one without (a Redis
    of its own), alike in every other setting, for the whole module."""
    second = EmbeddedRedis(tmp_path_factory.mktemp("redis-plain"))
    second.start()
    runners: list[web.AppRunner] = []
    clients: list[aioredis.Redis] = []
    try:
        sides = []
        for url, lean in ((redis_server.url, True), (second.url, False)):
            client = aioredis.Redis.from_url(url)
            clients.append(client)
            await client.flushall()
            with pytest.MonkeyPatch.context() as env:  # hermetic: no RSHUB_* of the caller's
                for name in list(os.environ):
                    if name.startswith("RSHUB_") and name != "RSHUB_TEST_TIME_SCALE":
                        env.delenv(name)
                settings = Settings(port=free_port(), lean_publish=lean, lean_sse=lean, **_SETTINGS)
            runner, app = await start_hub(settings, url)
            runners.append(runner)
            sides.append(Side(settings.port, app, client))
        yield Hubs(lean=sides[0], plain=sides[1])
    finally:
        for runner in runners:
            await runner.cleanup()
        for client in clients:
            await client.aclose()
        second.stop()


# -- one exchange -------------------------------------------------------------------------


def _dechunk(data: bytes) -> tuple[bytes, int, bool]:
    """The payload of the whole chunks at the start of ``data``, the bytes they took, and
    whether the last chunk was among them."""
    out, at = b"", 0
    while True:
        end = data.find(b"\r\n", at)
        if end < 0:
            return out, at, False
        try:
            size = int(data[at:end].split(b";")[0], 16)
        except ValueError:
            return out, at, False
        if len(data) < end + 2 + size + 2:
            return out, at, False
        out += data[end + 2 : end + 2 + size]
        at = end + 2 + size + 2
        if size == 0:
            return out, at, True


def _parse(received: bytes) -> tuple[list[Answer], bytes]:
    """The responses in ``received`` (the last one maybe a stream under way) and the bytes
    after the whole ones."""
    answers: list[Answer] = []
    at = 0
    while at < len(received):
        end = received.find(b"\r\n\r\n", at)
        if end < 0:
            break
        status, *lines = received[at:end].split(b"\r\n")
        headers = []
        size = 0
        chunked = False
        for line in lines:
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip()
            if name == b"content-length":
                size = int(value)
            if name == b"transfer-encoding" and value.lower() == b"chunked":
                chunked = True
            if name in EXCLUDED:
                value = b"-"
            elif name == b"x-request-id" and _MADE_ID.fullmatch(value):
                value = b"(made)"
            headers.append((name, value))
        start = end + 4
        if chunked:
            body, used, whole = _dechunk(received[start:])
            if not whole and not body:
                break
            answers.append(Answer(status, tuple(headers), _normal(body), whole))
            at = start + used
            if not whole:
                return answers, b""  # a stream under way: the rest is its own
            continue
        if len(received) < start + size:
            break
        answers.append(
            Answer(status, tuple(headers), _normal(received[start : start + size]), True)
        )
        at = start + size
    return answers, received[at:]


def _normal(body: bytes) -> bytes:
    return _EVENT_ID.sub(b"ID", _RESUME_ID.sub(b"m1.ID", body))


def _settled(received: bytes, live_sent: bool) -> bool:
    """What came is whole answers (or a stream's first chunks; with a live publish sent,
    its event too)."""
    answers, rest = _parse(received)
    if not answers or rest:
        return False
    if live_sent:
        return b"id: " in answers[-1].body
    return True


async def _send_all(port: int, data: bytes) -> None:
    """``data`` on a connection of its own; returns once answered (or closed)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        received = b""
        async with asyncio.timeout(_cap()):
            while not _settled(received, False):
                chunk = await reader.read(65536)
                if not chunk:
                    break
                received += chunk
        assert _parse(received)[0], received
    finally:
        writer.close()


async def _exchange(port: int, case: Case) -> Seen:
    loop = asyncio.get_running_loop()
    for data in case.before:
        await _send_all(port, data)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)

    async def send() -> None:
        for i, piece in enumerate(case.pieces):
            if i:
                await asyncio.sleep(case.pause)
            writer.write(piece)
            with contextlib.suppress(ConnectionError):
                await writer.drain()

    started = loop.time()
    sending = asyncio.create_task(send())
    received, closed, first = b"", False, None
    live_sent = False
    try:
        deadline = started + _cap()
        while True:
            settled = sending.done() and _settled(received, live_sent)
            if settled and case.live is not None and not live_sent:
                await _send_all(port, case.live)
                live_sent = True
                deadline = loop.time() + _cap()
                continue
            wait = _quiet() if settled else deadline - loop.time()
            if wait <= 0:
                break
            try:
                async with asyncio.timeout(wait):
                    chunk = await reader.read(65536)
            except TimeoutError:
                break
            except ConnectionError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            if first is None:
                first = loop.time() - started
            received += chunk
    finally:
        sending.cancel()
        with contextlib.suppress(BaseException):
            await sending
        writer.close()
    answers, rest = _parse(received)
    rest = re.sub(rb"(?im)^(date|x-request-id): [^\r]*", rb"\1: -", rest)
    return Seen(tuple(answers), rest, closed, first)


# -- comparing ----------------------------------------------------------------------------


def _differences(lean: Seen, plain: Seen, case: Case) -> list[str]:
    found = []
    if lean.answers != plain.answers:
        found.append(f"answers:\n  lean  {lean.answers}\n  plain {plain.answers}")
    if lean.rest != plain.rest:
        found.append(f"bytes after the answers: lean {lean.rest!r} plain {plain.rest!r}")
    if lean.closed != plain.closed:
        found.append(f"connection closed: lean {lean.closed} plain {plain.closed}")
    if case.timed:
        a, b = lean.first, plain.first
        if (a is None) != (b is None) or (
            a is not None and b is not None and abs(a - b) > _timing_slack()
        ):
            found.append(f"first answer after: lean {a} s, plain {b} s")
    return found


async def _run(hubs: Hubs, case: Case) -> list[str]:
    lean, plain = await asyncio.gather(
        _exchange(hubs.lean.port, case), _exchange(hubs.plain.port, case)
    )
    return _differences(lean, plain, case)


async def _run_all(hubs: Hubs, cases: list[Case]) -> dict[str, list[str]]:
    """Each case's differences (cases with none left out): run concurrently, and one found
    different run again alone, twice at most, to count."""
    gate = asyncio.Semaphore(_CONCURRENCY)

    async def one(case: Case) -> list[str]:
        async with gate:
            return await _run(hubs, case)

    first = await asyncio.gather(*(one(case) for case in cases))
    found: dict[str, list[str]] = {}
    for case, differences in zip(cases, first, strict=True):
        for _ in range(2):
            if not differences:
                break
            differences = await _run(hubs, case)
        if differences:
            found[case.name] = differences
    return found


async def _streams(side: Side) -> dict[str, list[dict[bytes, bytes]]]:
    """Every topic's stored events, in order, ids as positions."""
    found: dict[str, list[dict[bytes, bytes]]] = {}
    async for key in side.redis.scan_iter(match=keys.events("*")):
        name = key.decode()
        topic = name[name.index("{") + 1 : name.rindex("}")]
        entries = await side.redis.xrange(key)
        found[topic] = [{k: _normal(v) for k, v in fields.items()} for _id, fields in entries]
    return found


async def _stored_differences(hubs: Hubs, *, named: bool) -> dict[str, str]:
    """The topics (the named cases' ``n-...``, or all others) whose streams differ."""
    lean, plain = await _streams(hubs.lean), await _streams(hubs.plain)
    found = {}
    for topic in sorted(set(lean) | set(plain)):
        if topic.startswith("n-") == named and lean.get(topic) != plain.get(topic):
            found[topic] = (
                f"stored: lean {len(lean.get(topic, []))} events, plain {len(plain.get(topic, []))}"
            )
    return found


def _report(found: dict[str, Any], kind: str) -> str:
    lines = [f"{len(found)} {kind} case(s) differ (not in KNOWN):"]
    for name, what in list(found.items())[:40]:
        lines.append(f"- {name}: {what}")
    return "\n".join(lines)


def _unknown(found: dict[str, Any], kind: str | None = None) -> dict[str, Any]:
    return {n: w for n, w in found.items() if (kind or n) not in KNOWN}


# -- requests -----------------------------------------------------------------------------

_HOST = b"Host: 127.0.0.1\r\n"


def _body(i: int, n: int = 1) -> bytes:
    return notification(changes(n, start=i))


def publish(
    topic: str, body: bytes | None = None, *, extra: bytes = b"", head: bytes = b""
) -> bytes:
    """A plain publish to ``topic`` (``head``: its first line and headers before the rest,
    instead of the usual)."""
    body = _body(0) if body is None else body
    first = head or b"POST /topics/" + topic.encode() + b" HTTP/1.1\r\n" + _HOST
    return (
        first
        + b"Content-Type: application/xml\r\n"
        + extra
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


def subscribe(topic: str, *, extra: bytes = b"", version: bytes = b"HTTP/1.1") -> bytes:
    return (
        b"GET /topics/"
        + topic.encode()
        + b"/events "
        + version
        + b"\r\n"
        + _HOST
        + b"Accept: text/event-stream\r\n"
        + extra
        + b"\r\n"
    )


def _chunked(body: bytes, sizes: list[bytes] | None = None) -> bytes:
    half = len(body) // 2
    parts = [body[:half], body[half:]]
    sizes = sizes or [b"%x" % len(p) for p in parts]
    return b"".join(s + b"\r\n" + p + b"\r\n" for s, p in zip(sizes, parts, strict=True)) + (
        b"0\r\n\r\n"
    )


def _named() -> list[Case]:
    """The named cases, each on a topic of its own (named after the case)."""
    cases: list[Case] = []

    def add(name: str, *pieces: bytes, **options: Any) -> None:
        cases.append(Case(name, pieces, **options))

    body = _body(1)
    big_header = (
        b"User-Agent: "
        + b"u" * 3000
        + b"\r\nAccept: "
        + b"a" * 3000
        + (b"\r\nX-Request-Id: " + b"r" * 3000 + b"\r\n")
    )
    # -- the four defects the lean paths had
    add("9000-byte head, publish", publish("n-bighead-p", extra=big_header))
    add("9000-byte head, SSE", subscribe("n-bighead-s", extra=big_header))
    long_field = b"User-Agent: " + b"u" * 9000 + b"\r\n"
    add("one 9000-byte header, publish", publish("n-longfield-p", extra=long_field))
    add("one 9000-byte header, SSE", subscribe("n-longfield-s", extra=long_field))
    at_limit = b"User-Agent: " + b"u" * (8190 - len(b"User-Agent")) + b"\r\n"
    add("a header at aiohttp's limit, publish", publish("n-atlimit-p", extra=at_limit))
    add("a header at aiohttp's limit, SSE", subscribe("n-atlimit-s", extra=at_limit))
    over = b"User-Agent: " + b"u" * (8191 - len(b"User-Agent")) + b"\r\n"
    add("a header a byte over aiohttp's limit, publish", publish("n-overlimit-p", extra=over))
    add("a header a byte over aiohttp's limit, SSE", subscribe("n-overlimit-s", extra=over))
    long_target = b"/topics/n-longurl/events?" + b"q" * 8200
    add("a target over aiohttp's limit", b"GET " + long_target + b" HTTP/1.1\r\n" + _HOST + b"\r\n")
    many = b"".join(b"X-F%d: v\r\n" % i for i in range(130))
    add("130 headers, publish", publish("n-many-p", extra=many))
    add("130 headers, SSE", subscribe("n-many-s", extra=many))
    add(
        "no Host, publish",
        publish("n-nohost-p", head=b"POST /topics/n-nohost-p HTTP/1.1\r\n"),
    )
    add("no Host, SSE", b"GET /topics/n-nohost-s/events HTTP/1.1\r\nAccept: */*\r\n\r\n")
    # -- a changedump-notification takes the full parse on both paths, and its refusals too
    dump = (
        b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        b' xmlns:rs="http://www.openarchives.org/rs/terms/">'
        b'<rs:md capability="changedump-notification"/>%s</urlset>'
    )
    package = (
        b"<url><loc>http://source.invalid/dump/part1.zip</loc>"
        b'<rs:md type="application/zip" length="2048" from="2026-01-01T00:00:00Z"'
        b' until="2026-01-02T00:00:00Z"/>'
        b'<rs:ln rel="contents" href="http://source.invalid/dump/part1.xml"/></url>'
    )
    add("a changedump-notification", publish("n-dump", dump % package))
    add("a changedump-notification without packages", publish("n-dump-empty", dump % b""))
    timeless = b"<url><loc>http://source.invalid/dump/part2.zip</loc></url>"
    add("a changedump-notification package without a time", publish("n-dump-t", dump % timeless))
    add("two Hosts, SSE", subscribe("n-twohosts-s", extra=_HOST))
    stalled = publish("n-stalled")
    add("a body that stalls", stalled[:-20], timed=True)
    add(
        _SLOW_HEAD,
        stalled[:30],
        stalled[30:-20],
        pause=0.8 * _HEADER_TIMEOUT,
        timed=True,
    )
    add(
        "a body that comes late",
        stalled[:-20],
        stalled[-20:],
        pause=_BODY_TIMEOUT * 1.6,
        timed=True,
    )
    add("a body that comes in time", stalled[:-20], stalled[-20:], pause=_BODY_TIMEOUT * 0.3)
    add(
        "a publish then a malformed request, one read",
        publish("n-thenbad") + b"GARBAGE / HTTP/1.1\r\n\r\n",
    )
    thenbad = publish("n-endthenbad")
    add(
        "a publish's end and a malformed request, one read",
        thenbad[:-10],
        thenbad[-10:] + b"GARBAGE / HTTP/1.1\r\n\r\n",
        pause=0.05,
    )
    add(
        "a publish then a malformed header, one read",
        publish("n-thenbadheader") + b"POST /topics/n-thenbadheader HTTP/1.1\r\nBad Header\r\n\r\n",
    )
    add(
        "a publish then half a request, one read",
        publish("n-thenhalf") + publish("n-thenhalf")[:25],
    )
    add(
        "a subscribe then a malformed request, one read",
        subscribe("n-sthenbad") + b"GARBAGE\r\n\r\n",
    )
    # -- pipelining and connections
    add("two publishes, one read", publish("n-pipe2") + publish("n-pipe2", _body(2)))
    add(
        "two publishes, two reads",
        publish("n-pipe2r"),
        publish("n-pipe2r", _body(2)),
        pause=0.05,
    )
    add("three publishes, one read", publish("n-pipe3") * 3)
    add("a publish then a subscribe", publish("n-pubsub") + subscribe("n-pubsub"))
    add("a subscribe then a publish", subscribe("n-subpub") + publish("n-subpub"))
    add("Connection: close, publish", publish("n-close-p", extra=b"Connection: close\r\n"))
    add("Connection: close, SSE", subscribe("n-close-s", extra=b"Connection: close\r\n"))
    add("Connection: keep-alive, publish", publish("n-ka-p", extra=b"Connection: keep-alive\r\n"))
    add("Connection: keep-alive, SSE", subscribe("n-ka-s", extra=b"Connection: keep-alive\r\n"))
    add(
        "HTTP/1.0, publish",
        publish("n-10-p", head=b"POST /topics/n-10-p HTTP/1.0\r\n" + _HOST),
    )
    add(
        "HTTP/1.0 keep-alive, publish",
        publish(
            "n-10ka-p",
            head=b"POST /topics/n-10ka-p HTTP/1.0\r\n" + _HOST,
            extra=b"Connection: keep-alive\r\n",
        ),
    )
    add("HTTP/1.0, SSE", subscribe("n-10-s", version=b"HTTP/1.0"))
    add("HTTP/1.0 without Host, SSE", b"GET /topics/n-10nohost/events HTTP/1.0\r\n\r\n")
    add("HTTP/1.2, SSE", subscribe("n-12-s", version=b"HTTP/1.2"))
    add("HTTP/2.0, SSE", subscribe("n-20-s", version=b"HTTP/2.0"))
    # -- framing
    chunked_head = (
        b"POST /topics/n-chunked HTTP/1.1\r\n"
        + _HOST
        + b"Content-Type: application/xml\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    add("a chunked body", chunked_head + _chunked(body))
    add("a chunked body in pieces", chunked_head, _chunked(body), pause=0.05)
    bad_chunks = chunked_head.replace(b"n-chunked", b"n-badchunk")
    add("a bad chunk size", bad_chunks + _chunked(body, [b"zz", b"10"]))
    add("a chunk size too small", bad_chunks + _chunked(body, [b"1", b"2"]))
    add("a negative chunk size", bad_chunks + _chunked(body, [b"-1", b"2"]))
    add(
        "chunked and a length",
        publish("n-chunkedlen", extra=b"Transfer-Encoding: chunked\r\n"),
    )
    add(
        "two equal lengths",
        publish("n-twolen", extra=b"Content-Length: %d\r\n" % len(_body(0))),
    )
    add("two lengths", publish("n-twolen2", extra=b"Content-Length: 3\r\n"))
    add(
        "a length with a sign",
        publish("n-plus").replace(b"Content-Length: ", b"Content-Length: +"),
    )
    add("a length over max_body_bytes", publish("n-huge", b"x" * (48 * 1024 + 1)))
    large = _body(0, 200)
    assert 16 * 1024 < len(large) < 48 * 1024
    add("a body over parse_inline_bytes", publish("n-large", large))
    add("an empty body", publish("n-empty", b""))
    add("a body that is not XML", publish("n-notxml", b"hello"))
    add("a body on a subscribe", subscribe("n-sbody", extra=b"Content-Length: 5\r\n") + b"hello")
    add(
        "a gzip body",
        publish("n-gzip", gzip.compress(body, mtime=0), extra=b"Content-Encoding: gzip\r\n"),
    )
    add(
        "a gzip header on a plain body",
        publish("n-gzipplain", extra=b"Content-Encoding: gzip\r\n"),
    )
    add("Expect: 100-continue", publish("n-expect", extra=b"Expect: 100-continue\r\n"))
    add("Expect: something else", publish("n-expect2", extra=b"Expect: magic\r\n"))
    add(
        "Expect: 100-continue, SSE",
        subscribe("n-expect-s", extra=b"Expect: 100-continue\r\n"),
    )
    add(
        "Upgrade on a subscribe",
        subscribe("n-upgrade", extra=b"Connection: Upgrade\r\nUpgrade: websocket\r\n"),
    )
    # -- targets and methods
    add(
        "an absolute-form target, publish",
        publish("n-abs-p", head=b"POST http://127.0.0.1/topics/n-abs-p HTTP/1.1\r\n" + _HOST),
    )
    add(
        "an absolute-form target, SSE",
        b"GET http://127.0.0.1/topics/n-abs-s/events HTTP/1.1\r\n" + _HOST + b"\r\n",
    )
    add("a query string, SSE", b"GET /topics/n-query/events?x=1 HTTP/1.1\r\n" + _HOST + b"\r\n")
    add("an empty query, SSE", b"GET /topics/n-query2/events? HTTP/1.1\r\n" + _HOST + b"\r\n")
    add("a fragment, SSE", b"GET /topics/n-frag/events#x HTTP/1.1\r\n" + _HOST + b"\r\n")
    add(
        "a query string, publish",
        publish("n-query-p", head=b"POST /topics/n-query-p?x=1 HTTP/1.1\r\n" + _HOST),
    )
    add("percent-encoding, SSE", b"GET /topics/n%2Dpct/events HTTP/1.1\r\n" + _HOST + b"\r\n")
    add("a double slash, SSE", b"GET //topics/n-dbl/events HTTP/1.1\r\n" + _HOST + b"\r\n")
    add("dot segments, SSE", b"GET /topics/../topics/n-dot/events HTTP/1.1\r\n" + _HOST + b"\r\n")
    add("an asterisk target", b"OPTIONS * HTTP/1.1\r\n" + _HOST + b"\r\n")
    for method in (b"PUT", b"HEAD", b"OPTIONS", b"DELETE", b"PATCH", b"post", b"BREW"):
        name = method.decode().lower()
        add(
            f"method {method.decode()}, publish", publish(f"n-m-{name}").replace(b"POST", method, 1)
        )
        add(
            f"method {method.decode()}, SSE",
            subscribe(f"n-ms-{name}").replace(b"GET", method, 1),
        )
    add("a private topic, SSE", subscribe("secret"))
    add(
        "a private topic with its token", subscribe("secret", extra=b"Authorization: Bearer r1\r\n")
    )
    add("an invalid topic name, SSE", b"GET /topics/n!bad/events HTTP/1.1\r\n" + _HOST + b"\r\n")
    add(
        "an invalid topic name, publish",
        publish("n!bad", head=b"POST /topics/n!bad HTTP/1.1\r\n" + _HOST),
    )
    # -- header bytes
    add("a non-ASCII User-Agent, publish", publish("n-utf-p", extra=b"User-Agent: caf\xc3\xa9\r\n"))
    add("a non-ASCII User-Agent, SSE", subscribe("n-utf-s", extra=b"User-Agent: caf\xc3\xa9\r\n"))
    add("a Latin-1 Accept, SSE", subscribe("n-latin-s", extra=b"Accept: \xe9\r\n"))
    add("a control byte in a header, SSE", subscribe("n-ctl-s", extra=b"User-Agent: a\x01b\r\n"))
    add("a tab in a header, SSE", subscribe("n-tab-s", extra=b"User-Agent: a\tb\r\n"))
    add("a NUL in a header, publish", publish("n-nul-p", extra=b"User-Agent: a\x00b\r\n"))
    add("a trailing space in a header, SSE", subscribe("n-trail-s", extra=b"User-Agent: ab  \r\n"))
    add("a space before the colon, SSE", subscribe("n-spc-s", extra=b"User-Agent : x\r\n"))
    add("a folded header, SSE", subscribe("n-fold-s", extra=b"User-Agent: a\r\n b\r\n"))
    add("a bare LF, SSE", subscribe("n-lf-s").replace(b"\r\nAccept", b"\nAccept"))
    add("bare LFs only, SSE", subscribe("n-lfonly-s").replace(b"\r\n", b"\n"))
    add("a bare CR, SSE", subscribe("n-cr-s").replace(b"\r\nAccept", b"\rAccept"))
    add("a header without a colon, SSE", subscribe("n-nocolon-s", extra=b"NoColon\r\n"))
    add("an empty header name, SSE", subscribe("n-noname-s", extra=b": x\r\n"))
    add("an odd X-Request-Id, publish", publish("n-rid", extra=b"X-Request-Id: a b c\r\n"))
    add("a sane X-Request-Id, publish", publish("n-rid2", extra=b"X-Request-Id: trace-42\r\n"))
    add("Sec-WebSocket-Key1, SSE", subscribe("n-wskey1", extra=b"Sec-WebSocket-Key1: x\r\n"))
    # -- SSE resume points and what a subscriber sees
    add(
        "Last-Event-ID: 0, SSE",
        subscribe("n-leid", extra=b"Last-Event-ID: 0\r\n"),
        before=(publish("n-leid", _body(0, 3)),),
    )
    add(
        "Last-Event-ID far ahead, SSE",
        subscribe("n-leid2", extra=b"Last-Event-ID: 99999999999999-0\r\n"),
        before=(publish("n-leid2"),),
    )
    add("Last-Event-ID not an id, SSE", subscribe("n-leid3", extra=b"Last-Event-ID: nope\r\n"))
    add("a live event, SSE", subscribe("n-live"), live=publish("n-live", _body(5, 2)))
    add(
        "a live event after a resume, SSE",
        subscribe("n-live2", extra=b"Last-Event-ID: 0\r\n"),
        before=(publish("n-live2"),),
        live=publish("n-live2", _body(7)),
    )
    # -- resume times, and several topics on one stream (aiohttp's on both: the same bytes)
    add(
        "since a time, SSE",
        b"GET /topics/n-time/events?since=2020-01-01T00:00:00Z HTTP/1.1\r\n" + _HOST + b"\r\n",
        before=(publish("n-time", _body(0, 2)),),
        live=publish("n-time", _body(3)),
    )
    add(
        "Last-Event-ID a time, SSE",
        subscribe("n-leidtime", extra=b"Last-Event-ID: 2020-01-01T00:00:00+01:00\r\n"),
        before=(publish("n-leidtime"),),
    )
    add(
        "Last-Event-ID a bad time, SSE", subscribe("n-badtime", extra=b"Last-Event-ID: 2020-13\r\n")
    )
    several = b"GET /events?topic=n-mx-a,n-mx-b&since=0 HTTP/1.1\r\n" + _HOST + b"\r\n"
    add(
        "several topics, SSE",
        several,
        before=(publish("n-mx-a", _body(0, 2)), publish("n-mx-b")),
        live=publish("n-mx-b", _body(4)),
    )
    add(
        "a topic prefix, SSE",
        b"GET /events?topic_prefix=n-mxp- HTTP/1.1\r\n" + _HOST + b"\r\n",
        before=(publish("n-mxp-1"),),
        live=publish("n-mxp-2", _body(6)),
    )
    add(
        "several topics from a resume id, SSE",
        b"GET /events?topic=n-mxr&since=m1.AAAA HTTP/1.1\r\n" + _HOST + b"\r\n",
        before=(publish("n-mxr", _body(0, 2)),),
    )
    add("several topics, a bad resume id", several.replace(b"since=0", b"since=m1.%21"))
    add("several topics, none named", b"GET /events HTTP/1.1\r\n" + _HOST + b"\r\n")
    add("several topics, one private", several.replace(b"n-mx-b", b"secret"))
    add("a subscribe a byte at a time", *[bytes([b]) for b in subscribe("n-bytes")], pause=0.001)
    add("a publish in 3 pieces", *_split(publish("n-pieces"), 3), pause=0.01)
    add("garbage", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
    add("a request line only", b"GET /topics/n-line/events HTTP/1.1\r\n")
    add("nothing at all")
    return cases


def _split(data: bytes, n: int) -> list[bytes]:
    step = max(1, len(data) // n)
    return [data[i : i + step] for i in range(0, len(data), step)]


# -- the mutator --------------------------------------------------------------------------

_CHARS = b" :\r\n\t/%?#<>\"'\x00\x01\x7f\x80\xffPOSTGEHP1.;,=-"
_HEADERS = [
    b"Transfer-Encoding: chunked\r\n",
    b"Transfer-Encoding: gzip, chunked\r\n",
    b"Expect: 100-continue\r\n",
    b"Connection: close\r\n",
    b"Connection: keep-alive\r\n",
    b"Connection: Upgrade\r\nUpgrade: websocket\r\n",
    b"Content-Encoding: gzip\r\n",
    b"Content-Length: 5\r\n",
    b"Content-Length: 0\r\n",
    b"Content-Length: +5\r\n",
    b"Host: 127.0.0.1\r\n",
    b"Host: other.invalid\r\n",
    b"Host:\r\n",
    b"Last-Event-ID: 0\r\n",
    b"Last-Event-ID: 99999999999999-0\r\n",
    b"Authorization: Bearer x\r\n",
    b"Origin: http://other.invalid\r\n",
    b"User-Agent: " + b"u" * 9000 + b"\r\n",
    b"User-Agent: " + b"u" * (8190 - 10) + b"\r\n",
    b"X-Long: " + b"x" * 4000 + b"\r\nX-Long2: " + b"y" * 4500 + b"\r\n",
    b"X-Bin: \xff\xfe\r\n",
    b"X-Ctl: a\x01b\r\n",
    b"User-Agent: a\x00b\r\n",
    b"Sec-WebSocket-Key1: x\r\n",
    b"Idempotency-Key: k1\r\n",
    b"Content-Type: text/plain\r\n",
    b"Accept-Encoding: gzip\r\n",
    b"Cache-Control: no-cache\r\n",
    b"X-Request-Id: fuzz-1\r\n",
    b" folded\r\n",
    b"NoColon\r\n",
    b"Bad Name: x\r\n",
    b"Accept : x\r\n",
    b"Pragma: no-cache\r\n",
    b"DNT: 1\r\n",
]
_VERSIONS = [
    b"HTTP/1.0",
    b"HTTP/1.2",
    b"HTTP/2.0",
    b"HTTP/0.9",
    b"http/1.1",
    b"HTTP/1.1 ",
    b"HTTP/11",
]
_METHODS = [b"GET", b"POST", b"PUT", b"HEAD", b"OPTIONS", b"DELETE", b"get", b"PRI", b"CONNECT"]


def _mutated(
    rng: random.Random, data: bytes, *, publishing: bool
) -> tuple[tuple[bytes, ...], float]:
    """``data`` with 1-3 of the mutations below; and the pieces to send it in, with the
    pause between them."""
    for _ in range(rng.randint(1, 3)):
        data = _mutation(rng, data, publishing)
    if rng.random() < 0.15:
        return tuple(_split(data, rng.randint(2, 5))), 0.005
    return (data,), 0.0


def _mutation(rng: random.Random, data: bytes, publishing: bool) -> bytes:
    end = data.find(b"\r\n\r\n")
    head_end = end + 2 if end > 0 else len(data)
    lines = [m.end() for m in re.finditer(rb"\r\n", data[:head_end])]
    what = rng.randrange(16)
    at = rng.randrange(max(1, head_end))
    if what == 0:  # a byte replaced
        out = bytearray(data)
        out[at] = rng.choice(_CHARS) if rng.random() < 0.7 else rng.randrange(256)
        return bytes(out)
    if what == 1:  # a byte removed
        return data[:at] + data[at + 1 :]
    if what == 2:  # a byte inserted
        return data[:at] + bytes([rng.choice(_CHARS)]) + data[at:]
    if what in (3, 4) and lines:  # a header added
        line = rng.choice(lines)
        return data[:line] + rng.choice(_HEADERS) + data[line:]
    if what == 5 and len(lines) > 1:  # a header line dropped (Host, say)
        i = rng.randrange(len(lines) - 1)
        return data[: lines[i]] + data[lines[i + 1] :]
    if what == 6 and len(lines) > 1:  # a header line twice
        i = rng.randrange(len(lines) - 1)
        return data[: lines[i + 1]] + data[lines[i] : lines[i + 1]] + data[lines[i + 1] :]
    if what == 7:
        return data.replace(b"HTTP/1.1", rng.choice(_VERSIONS), 1)
    if what == 8:
        method = data.split(b" ", 1)[0]
        return rng.choice(_METHODS) + data[len(method) :]
    if what == 9:  # the target
        target = data.split(b" ", 2)[1] if data.count(b" ") >= 2 else b""
        if not target:
            return data
        other = rng.choice(
            [
                target + b"?x=1",
                b"http://127.0.0.1" + target,
                target + b"#f",
                target.replace(b"/", b"//", 1),
                target + b"/",
                target.replace(b"-", b"%2D"),
                target.upper(),
                b"*",
            ]
        )
        return data.replace(target, other, 1)
    if what == 10 and lines:  # line endings
        line = rng.choice(lines)
        return data[: line - 2] + rng.choice([b"\n", b"\r", b"\r\r\n", b" \r\n"]) + data[line:]
    if what == 11 and lines:  # many headers
        line = rng.choice(lines)
        count = rng.choice([60, 126, 127, 128, 129, 200])
        return data[:line] + b"".join(b"X-N%d: v\r\n" % i for i in range(count)) + data[line:]
    if what == 12 and publishing and end > 0:  # the body's framing
        head, body = data[: end + 4], data[end + 4 :]
        how = rng.randrange(5)
        if how == 0:  # a length off by some
            size = int(m.group(1)) if (m := re.search(rb"Content-Length: (\d+)", head)) else 0
            return (
                re.sub(
                    rb"Content-Length: \d+",
                    b"Content-Length: %d" % max(0, size + rng.randint(-5, 5)),
                    head,
                    count=1,
                )
                + body
            )
        if how == 1:  # cut short
            return head + body[: rng.randrange(len(body) + 1)]
        if how == 2:  # chunked
            return re.sub(
                rb"Content-Length: \d+\r\n", b"Transfer-Encoding: chunked\r\n", head, count=1
            ) + _chunked(body)
        if how == 3:  # gzip
            packed = gzip.compress(body, mtime=0)
            head = re.sub(
                rb"Content-Length: \d+", b"Content-Length: %d" % len(packed), head, count=1
            )
            return head[:-2] + b"Content-Encoding: gzip\r\n\r\n" + packed
        return data + b"trailing"
    if what == 13:  # a second request behind it, whole or cut
        again = data if rng.random() < 0.5 else data[: rng.randrange(len(data))]
        return data + again
    if what == 14:  # a malformed request behind it
        return data + rng.choice(
            [b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nBad Header\r\n\r\n", b"\x00\x01"]
        )
    if what == 15:  # the target's topic changed (another case's name, a bad one)
        return data.replace(
            b"/topics/f", rng.choice([b"/topics/g", b"/topics/%", b"/topics/f\xff"]), 1
        )
    return data


def _fuzz_cases(seed: int, count: int, publishing: bool) -> list[Case]:
    rng = random.Random(seed)
    cases = []
    for i in range(count):
        topic = f"f{'p' if publishing else 's'}{i}"
        extra = rng.choice(
            [
                b"",
                b"User-Agent: fuzz\r\n",
                b"Accept: */*\r\nUser-Agent: x/1\r\n",
                b"X-Request-Id: fz\r\n",
            ]
        )
        if publishing:
            base = publish(
                topic,
                _body(i, rng.randint(1, 3)),
                extra=extra if b"Accept" not in extra else b"Accept: */*\r\n",
            )
        else:
            base = subscribe(topic, extra=extra if b"X-Request" not in extra else b"")
        if i % 10 == 0:  # some unmutated
            pieces, pause = (base,), 0.0
        else:
            pieces, pause = _mutated(rng, base, publishing=publishing)
        cases.append(Case(f"{topic}: {b''.join(pieces)[:200]!r}", pieces, pause))
    return cases


# -- the tests ----------------------------------------------------------------------------


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.timeout(120)
async def test_named_cases_are_answered_alike(hubs: Hubs, caplog: pytest.LogCaptureFixture) -> None:
    cases = _named()
    assert len({c.name for c in cases}) == len(cases)
    found = _unknown(await _run_all(hubs, cases))
    stored = await _stored_differences(hubs, named=True)
    assert not found and not stored, _report(found, "named") + "\n" + _report(stored, "stored")
    assert not _errors(caplog), _errors(caplog)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("path", ["publish", "sse"])
async def test_mutated_requests_are_answered_alike(
    hubs: Hubs, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    publishing = path == "publish"
    cases = _fuzz_cases(22 if publishing else 23, 1000, publishing)
    started = time.monotonic()
    found = _unknown(await _run_all(hubs, cases), f"{path}-fuzz")
    stored = await _stored_differences(hubs, named=False)
    assert not found and not stored, _report(found, path) + "\n" + _report(stored, "stored")
    assert not _errors(caplog), _errors(caplog)
    assert time.monotonic() - started < 60 * TIME_SCALE


async def test_starts_kept_for_aiohttp_do_not_pile_up(hubs: Hubs) -> None:
    """A request handed to aiohttp carries its start to its handler; one that aiohttp
    refuses before any handler runs never collects it, and the guard drops it once its
    connection has ended."""
    guard = hubs.lean.app[_GUARD]

    async def refused() -> bool:
        """Whether the 400 was read: the hub closes after it, and a close with bytes
        unread may reach a slow client as a reset before the answer does."""
        reader, writer = await asyncio.open_connection("127.0.0.1", hubs.lean.port)
        try:
            writer.write(b"GARBAGE\r\n\r\n")
            async with asyncio.timeout(_cap()):
                answer = await reader.read()
        except ConnectionResetError:
            return False
        finally:
            writer.close()
        assert answer.startswith(b"HTTP/1.0 400 Bad Request"), answer[:80]
        return True

    answered = 0
    for _ in range(6):
        answered += sum(await asyncio.gather(*(refused() for _ in range(100))))
    assert answered >= 300, answered  # most were read whole: the hub did refuse them
    assert len(guard._began) <= 2 * _BEGAN_KEPT
