"""The hub's GETs (WebSub verifications, publish-ping fetches) against hostile answers.

They go through :class:`CallbackConnections` like deliveries: a body is read up to the
GET's limit and within its timeout, a longer one is cut and its connection closed. Named
cases on a real hub under the :class:`Watchdog` (verification answers and ping documents
played by :class:`HostileCallback`), the client against scripted servers on both loops,
and a seeded fuzz of answers reusing the one of delivery answers.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest

from hub.core.exceptions import CallbackFailed
from hub.live.callback_connections import CallbackConnections
from hub.store import keys
from hub.web.app import RUNTIME
from tests.conftest import Hub
from tests.hub.hostile_callback import Answer, HostileCallback, Play
from tests.hub.test_callback_connections import on_both_loops
from tests.hub.test_hostile_answers import CHUNKED, SEED_STATUS, SEEDS, drips, mutate, peers
from tests.support import TIME_SCALE, changes, notification, wait_for
from tests.watchdog import Watchdog

LIMIT = 64 * 1024


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"verify_timeout": 1.0, "max_body_bytes": LIMIT}


def answers(make: Callable[[Answer], bytes], *, close: bool = False) -> Play:
    """Writes ``make(answer)`` (the challenge is on the answer), keeps the connection open
    unless ``close``."""

    async def play(answer: Answer) -> None:
        answer.write(make(answer))
        if close:
            answer.close()

    return play


def dripped(head: bytes, body: bytes, piece: int, every: float) -> Play:
    """``head``, then ``body`` ``piece`` bytes at a time every ``every`` seconds."""

    async def play(answer: Answer) -> None:
        answer.write(head)
        for at in range(0, len(body), piece):
            await asyncio.sleep(every)
            if not answer.open:
                return
            answer.write(body[at : at + piece])

    return play


def _head(length: int | str, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %s\r\n%s\r\n" % (str(length).encode(), extra)


#: name: (the answer to the verification GET, what the hub logs of its outcome, or None
#: when the subscription is verified; whether the hub must close the connection).
VERIFICATIONS: dict[str, tuple[Play, str | None, bool]] = {
    "body_that_never_ends": (
        drips(CHUNKED, b"1\r\nx\r\n", 0.05),
        "answer's body not complete within 1 s",
        True,
    ),
    "content_length_lies_long": (
        answers(lambda a: _head(100_000) + a.challenge),
        "answer's body not complete within 1 s",
        True,
    ),
    "content_length_lies_short": (
        answers(lambda a: _head(2) + a.challenge + b" and then some"),
        "refused (status 200)",
        True,
    ),
    "a_megabyte_body_past_the_limit": (
        answers(lambda a: _head(1 << 20) + a.challenge + b"x" * ((1 << 20) - len(a.challenge))),
        "refused (status 200)",
        True,
    ),
    "closed_mid_body": (
        answers(lambda a: _head(100) + a.challenge, close=True),
        "connection closed before the body ended",
        True,
    ),
    "chunked_and_kept_alive": (
        answers(lambda a: CHUNKED + b"%x\r\n%s\r\n0\r\n\r\n" % (len(a.challenge), a.challenge)),
        None,
        False,
    ),
}


async def _warm(hub: Hub) -> None:
    """The test's own connection to the hub is open before the watchdog counts sockets."""
    async with hub.session.get(f"{hub.url}/healthz") as resp:
        assert resp.status == 200


@pytest.mark.parametrize("name", VERIFICATIONS)
async def test_a_hostile_verification_answer(
    hub: Hub, redis_url: str, caplog: pytest.LogCaptureFixture, name: str
) -> None:
    play, outcome, closes = VERIFICATIONS[name]
    caplog.set_level(logging.INFO, logger="hub.live.delivery")
    hostile = await HostileCallback(play, get=play).start()
    form = {"hub.mode": "subscribe", "hub.topic": f"{hub.url}/topics/t", "hub.callback": ""}
    form["hub.callback"] = hostile.url
    try:
        await _warm(hub)
        async with Watchdog() as dog:
            async with hub.session.post(hub.url + "/", data=form) as resp:
                assert resp.status == 202
            if outcome is None:
                await wait_for(lambda: ("t", hostile.url) in hub.app[RUNTIME].delivery.workers)
            else:
                said = [f"verification of {hostile.url!r}", outcome]

                def logged() -> bool:
                    return any(all(s in r.getMessage() for s in said) for r in caplog.records)

                await wait_for(logged, 5 * TIME_SCALE)
                assert await hub.app[RUNTIME].subscriptions.get("t", hostile.url) is None
            if closes:  # the hub closed it: the callback keeps its side open
                await wait_for(lambda: hostile.lost >= 1, 5 * TIME_SCALE)
        if outcome is None:  # end the subscription: its worker holds a connection
            hostile.finish = True
            await hub.publish("t", notification(changes(1)))
            await wait_for(lambda: ("t", hostile.url) not in hub.app[RUNTIME].delivery.workers)
        await dog.sockets_back()
        if closes:
            await wait_for(lambda: not peers(hostile.port), 5)  # its last connection closing
    finally:
        await hostile.stop()


async def ping(hub: Hub, url: str) -> tuple[int, dict[str, Any]]:
    async with hub.session.post(
        hub.url + "/", data={"hub.mode": "publish", "hub.url": url}
    ) as resp:
        return resp.status, await resp.json()


DOCUMENT = notification(changes(3, prefix="http://source.example/r"))
MEGABYTE = b"<" + b"x" * ((1 << 20) - 1)

#: name: (the answer to the ping's GET, the hub's status, what its error says).
PINGS: dict[str, tuple[Play, int, str]] = {
    "a_megabyte_past_the_limit_in_pieces": (
        dripped(_head(len(MEGABYTE)), MEGABYTE, 16 * 1024, 0.01),
        413,
        f"larger than the {LIMIT}-byte publish limit",
    ),
    "a_megabyte_past_the_limit_at_once": (
        answers(lambda _: _head(len(MEGABYTE)) + MEGABYTE),
        413,
        f"larger than the {LIMIT}-byte publish limit",
    ),
    "a_document_that_never_ends": (
        drips(CHUNKED, b"1\r\n \r\n", 0.05),
        502,
        "answer's body not complete within 1 s",
    ),
    "a_lying_content_length": (
        answers(lambda _: _head(len(DOCUMENT) + 10) + DOCUMENT),
        502,
        "answer's body not complete within 1 s",
    ),
    "a_redirect": (
        answers(
            lambda _: b"HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n",
            close=True,
        ),
        502,
        "gave HTTP 302",
    ),
}


@pytest.mark.parametrize("name", PINGS)
async def test_a_hostile_ping_document(hub: Hub, redis_url: str, name: str) -> None:
    play, status, says = PINGS[name]
    source = await HostileCallback(play, get=play).start()
    try:
        await _warm(hub)
        async with Watchdog() as dog:
            got, body = await ping(hub, source.url)
            assert got == status, body
            assert says in body["error"], body
            assert await hub.redis.keys(keys.events("*")) == []
            if status == 413:  # cut at the limit: the hub closed the connection
                await wait_for(lambda: source.lost >= 1, 5 * TIME_SCALE)
        await dog.sockets_back()
    finally:
        await source.stop()


async def test_a_ping_document_that_arrives_in_pieces_is_read_whole(hub: Hub) -> None:
    """The limit is an upper bound, not a read of whatever has arrived so far."""
    source = await HostileCallback(
        writes_nothing, get=dripped(_head(len(DOCUMENT)), DOCUMENT, 100, 0.02)
    ).start()
    try:
        async with Watchdog():
            status, body = await ping(hub, source.url)
        assert status == 202 and body["accepted"] == 3, body
    finally:
        await source.stop()


async def writes_nothing(answer: Answer) -> None:
    return None


# -- the client against scripted servers ------------------------------------------------

#: A scripted reply that is never sent (the request waits for an answer).
HOLD = None


class _GetServing(asyncio.Protocol):
    def __init__(self, server: GetServer) -> None:
        self.server = server
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.server.connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.lost += 1

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].decode("latin-1")
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            self.buffer = self.buffer[end + 4 + length :]
            self.server.requests.append(head)
            reply = self.server.replies.pop(0)
            if reply is None:  # HOLD
                continue
            self.transport.write(reply)
            if self.server.close_after_reply:
                self.transport.close()


class GetServer:
    """Answers the n-th request (GET or POST) with ``replies[n]``, raw."""

    def __init__(self, replies: list[bytes | None], *, close_after_reply: bool = False) -> None:
        self.replies = replies
        self.close_after_reply = close_after_reply
        self.requests: list[str] = []
        self.connections = 0
        self.lost = 0

    async def start(self) -> str:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: _GetServing(self), "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v?hub.challenge=c"


async def with_pool(
    replies: list[bytes | None],
    use: Callable[[CallbackConnections, str], Awaitable[None]],
    *,
    close_after_reply: bool = False,
) -> GetServer:
    server = GetServer(replies, close_after_reply=close_after_reply)
    url = await server.start()
    pool = CallbackConnections(allow_private=True)
    try:
        await use(pool, url)
    finally:
        await pool.close()
        server.server.close()
    return server


@on_both_loops
async def test_gets_read_bodies_of_every_framing_on_one_connection() -> None:
    bodies: list[tuple[int, bytes]] = []

    async def use(pool: CallbackConnections, url: str) -> None:
        for _ in range(3):
            status, _headers, body = await pool.get(url, {"Accept": "application/xml"}, 5.0, 100)
            bodies.append((status, body))
        status, _ = await pool.post(url, b"<x/>", {}, 5.0)  # deliveries share the pool
        bodies.append((status, b""))
        status, _headers, body = await pool.get(url, {}, 5.0, 100)
        bodies.append((status, body))

    server = await with_pool(
        [
            _head(5) + b"hello",
            CHUNKED + b"3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nT: 1\r\n\r\n",
            b"HTTP/1.1 204 No Content\r\n\r\n",
            b"HTTP/1.1 202 Accepted\r\nContent-Length: 3\r\n\r\nign",
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n",
        ],
        use,
    )
    assert bodies == [(200, b"hello"), (200, b"abcde"), (204, b""), (202, b""), (304, b"")]
    assert server.connections == 1
    assert server.requests[0].startswith("GET /v?hub.challenge=c HTTP/1.1\r\nHost: 127.0.0.1:")
    assert "\r\nAccept: application/xml" in server.requests[0]
    assert "content-length" not in server.requests[0].lower()


@on_both_loops
async def test_a_body_without_length_ends_with_the_connection() -> None:
    got: list[tuple[int, dict[str, str], bytes]] = []

    async def use(pool: CallbackConnections, url: str) -> None:
        got.append(await pool.get(url, {}, 5.0, 100))

    await with_pool([b"HTTP/1.1 200 OK\r\nX-A: b\r\n\r\nuntil close"], use, close_after_reply=True)
    assert got == [(200, {"x-a": "b"}, b"until close")]


@on_both_loops
async def test_a_body_past_the_limit_is_cut_and_its_connection_closed() -> None:
    got: list[bytes] = []

    async def use(pool: CallbackConnections, url: str) -> None:
        got.append((await pool.get(url, {}, 5.0, 1000))[2])
        got.append((await pool.get(url, {}, 5.0, 1000))[2])

    server = await with_pool([_head(1 << 20) + b"y" * (1 << 20), _head(2) + b"ok"], use)
    assert got == [b"y" * 1000, b"ok"]
    assert server.connections == 2  # the cut connection was not reused


@on_both_loops
async def test_a_body_that_ends_early_or_never_fails() -> None:
    errors: list[str] = []

    async def use(pool: CallbackConnections, url: str) -> None:
        with pytest.raises(CallbackFailed) as caught:
            await pool.get(url, {}, 0.6, 1000)
        errors.append(str(caught.value))

    await with_pool([_head(100) + b"short"], use, close_after_reply=True)
    server = await with_pool([_head(100) + b"short"], use)  # and then nothing
    assert errors == [
        "connection closed before the body ended",
        "answer's body not complete within 0.6 s",
    ]
    await wait_for(lambda: server.lost == 1)  # the hub closed it


async def test_a_request_on_a_connection_just_handed_back_keeps_its_deadline() -> None:
    """A GET's answer puts its connection back in the pool before the GET's task resumes;
    a request taking the connection in between keeps its deadline (it did not: the GET's
    task then dropped the connection from the requests the sweep times out)."""
    server = GetServer([_head(2) + b"ok", HOLD])
    url = await server.start()
    pool = CallbackConnections(allow_private=True)

    async def second() -> BaseException | None:
        # Polled every loop pass, to run right after the answer, before the GET's task.
        while not pool.idle_count:  # noqa: ASYNC110
            await asyncio.sleep(0)
        try:
            await pool.post(url, b"<x/>", {}, 0.6)
        except CallbackFailed as exc:
            return exc
        return None

    try:
        waiting = asyncio.create_task(second())
        await asyncio.sleep(0)
        assert (await pool.get(url, {}, 5.0, 100))[2] == b"ok"
        failure = await asyncio.wait_for(waiting, 5 * TIME_SCALE)
        assert server.connections == 1  # the POST did take the GET's connection
        assert str(failure) == "no answer within 0.6 s"
    finally:
        await pool.close()
        server.server.close()


# -- a seeded fuzz of GET answers ------------------------------------------------------

#: The body a GET reads from each of :data:`SEEDS` (answered, then the connection closed).
SEED_BODY = [b"hello", b"abc", b"", b"", b"", b"body until close", b"", b""]


async def test_a_seeded_fuzz_of_5000_get_answers() -> None:
    rng = random.Random(20261125)
    replies: list[bytes | None] = []
    expected: list[tuple[int, bytes] | None] = []  # of an unmutated answer, else None
    limits: list[int] = []
    for _ in range(5000):
        i = rng.randrange(len(SEEDS))
        limits.append(rng.choice([3, 4096]))
        if rng.random() < 0.1:
            replies.append(SEEDS[i])
            expected.append((SEED_STATUS[i], SEED_BODY[i][: limits[-1]]))
        else:
            replies.append(mutate(rng, SEEDS[i]))
            expected.append(None)
    fuzz = GetServer(list(replies), close_after_reply=True)
    healthy = GetServer([_head(2) + b"ok"] * 100)
    async with Watchdog() as dog:
        url, good = await fuzz.start(), await healthy.start()
        pool = CallbackConnections(allow_private=True)
        outcomes = {"answered": 0, "failed": 0}
        try:
            for n, want in enumerate(expected):
                try:
                    status, _headers, body = await pool.get(url, {}, 2.0, limits[n])
                except CallbackFailed:
                    assert want is None, (n, replies[n])
                    outcomes["failed"] += 1
                else:
                    assert want is None or (status, body) == want, (n, replies[n], status, body)
                    assert 100 <= status <= 999 and len(body) <= limits[n]
                    outcomes["answered"] += 1
                if n % 50 == 0:  # a healthy server on the same pool keeps being served
                    assert (await pool.get(good, {}, 2.0, 10))[2] == b"ok"
        finally:
            await pool.close()
            fuzz.server.close()
            healthy.server.close()
        assert len(fuzz.requests) == 5000  # every answer was asked for: none was skipped
        assert outcomes["answered"] > 500 and outcomes["failed"] > 500, outcomes
    await dog.sockets_back()
