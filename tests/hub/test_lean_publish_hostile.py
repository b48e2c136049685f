"""Hostile publishes at the lean publish path (hub.web.lean_publish, on
hub.web.lean_connection's parser).

Named cases (pipelining, a request a byte at a time, a body that never ends, a peer gone
mid-body or right after its request, bad and oversized lengths, idle keep-alive) and a
seeded fuzz of mutated publish requests, under the watchdog: no loop stall, no ERROR log,
no leaked socket; every answer a 202 or a 4xx; and nothing half-stored: the topics' Redis
streams hold exactly the ids the 202s named, in their order.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from typing import Any

import orjson
import pytest

from hub.store import keys
from tests.conftest import Hub
from tests.hub.request_mutations import mutate, send_in_pieces
from tests.hub.test_lean_publish import Conn, LeanSpy, lean_spy, request, stored
from tests.support import TIME_SCALE, changes, notification, wait_for
from tests.watchdog import Watchdog

_HEADER_TIMEOUT = 1.0
_BODY_TIMEOUT = 1.0
_KEEPALIVE = 1.0


__all__ = ["lean_spy"]  # the fixture


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {
        "header_timeout_seconds": _HEADER_TIMEOUT,
        "body_timeout_seconds": _BODY_TIMEOUT,
        "keepalive_timeout_seconds": _KEEPALIVE,
        "max_body_bytes": 200_000,
        "parse_inline_bytes": 64 * 1024,
    }


@pytest.fixture
def lean_served(lean_spy: LeanSpy) -> list[str]:
    _SPY[:] = [lean_spy]
    return lean_spy.served


def _port(hub: Hub) -> int:
    return int(hub.url.rsplit(":", 1)[1])


def _plain(i: int = 0, topic: str = "t") -> bytes:
    return request(notification(changes(1, start=i)), topic, token=None)


async def _all_answers(hub: Hub, data: bytes, *, pieces: int = 1) -> tuple[bytes, float]:
    """Everything the hub sends back to ``data`` until it closes, or goes quiet for a
    moment after complete answers; and how long that took."""
    reader, writer = await asyncio.open_connection("127.0.0.1", _port(hub))
    started = time.monotonic()
    received = b""
    try:
        await send_in_pieces(writer, data, pieces)
        deadline = started + 4 * TIME_SCALE
        while (left := deadline - time.monotonic()) > 0:
            quiet = 0.3 * TIME_SCALE if _complete(received) else left
            try:
                async with asyncio.timeout(min(quiet, left)):
                    chunk = await reader.read(65536)
            except TimeoutError:
                break
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
        return received, time.monotonic() - started
    finally:
        writer.close()


def _complete(received: bytes) -> bool:
    """``received`` is whole responses (one at least), each with its sized body."""
    at = 0
    while at < len(received):
        end = received.find(b"\r\n\r\n", at)
        if end < 0:
            return False
        sized = re.search(rb"(?im)^content-length: *(\d+)", received[at:end])
        at = end + 4 + (int(sized.group(1)) if sized else 0)
    return at == len(received) and at > 0


def _responses(received: bytes) -> list[tuple[int, bytes]]:
    """(status, body) of each complete response in ``received``."""
    out = []
    for match in re.finditer(rb"HTTP/1\.[01] (\d{3}) [^\r]*\r\n((?:[^\r]+\r\n)*)\r\n", received):
        sized = re.search(rb"(?im)^content-length: *(\d+)", match.group(2))
        size = int(sized.group(1)) if sized else 0
        out.append((int(match.group(1)), received[match.end() : match.end() + size]))
    return out


async def _stream_ids(hub: Hub) -> dict[str, list[str]]:
    """Every topic's stored event ids (all the event streams in Redis)."""
    found: dict[str, list[str]] = {}
    async for key in hub.redis.scan_iter(match=keys.events("*")):
        name = key.decode() if isinstance(key, bytes) else key
        topic = name[name.index("{") + 1 : name.rindex("}")]
        found[topic] = await stored(hub, topic)
    return {t: ids for t, ids in found.items() if ids}


async def _warm_up(hub: Hub) -> None:
    """The hub's Redis connections open before the sockets are counted."""
    conn = await Conn.open(hub)
    try:
        head, _ = await conn.ask(_plain(0, "warm"))
        assert head.startswith(b"HTTP/1.1 202 ")
    finally:
        conn.close()


async def test_named_hostile_publishes(hub: Hub, lean_served: list[str]) -> None:
    await _warm_up(hub)
    expected: list[str] = await stored(hub, "t")
    async with Watchdog() as dog:
        # Two publishes in one write: aiohttp's path takes both, in order.
        received, _ = await _all_answers(hub, _plain(1) + _plain(2))
        answers = _responses(received)
        assert [s for s, _ in answers] == [202, 202], received
        expected += [i for _, b in answers for i in orjson.loads(b)["ids"]]
        assert lean_served == ["warm"]
        # A publish a byte at a time: still plain, answered lean.
        received, _ = await _all_answers(hub, _plain(3), pieces=len(_plain(3)))
        ((status, body),) = _responses(received)
        assert status == 202 and lean_served == ["warm", "t"]
        expected += orjson.loads(body)["ids"]
        # Bad lengths, a length over the limit, both framings: aiohttp's 4xx, as before.
        body = notification(changes(1))
        cases = {
            "negative length": request(body).replace(b"Content-Length: ", b"Content-Length: -"),
            "length with a sign": request(body).replace(b"Content-Length: ", b"Content-Length: +"),
            "two lengths": request(body, extra="Content-Length: 3\r\n"),
            "length and chunked": request(body, extra="Transfer-Encoding: chunked\r\n"),
            "over max_body_bytes": request(b"x" * 200_001),
            "NUL in the path": request(body, topic="t\x00"),
            "NUL in a header": request(body, extra="Idempotency-Key: a\x00b\r\n"),
        }
        for name, data in cases.items():
            received, _ = await _all_answers(hub, data)
            statuses = [s for s, _ in _responses(received)]
            assert statuses and 400 <= statuses[0] < 500, (name, received[:300])
        # A body over parse_inline_bytes: aiohttp's path (parsed off the loop), stored.
        big = notification(changes(700))
        assert len(big) > 64 * 1024
        received, _ = await _all_answers(hub, request(big, token=None))
        ((status, answer),) = _responses(received)
        assert status == 202, received[:300]
        expected += orjson.loads(answer)["ids"]
        assert lean_served == ["warm", "t"]
        # A body that never ends: aiohttp's path takes it over at the body deadline and
        # answers 408 at its own; nothing stored.
        data = _plain(4)
        received, took = await _all_answers(hub, data[:-10])
        assert [s for s, _ in _responses(received)] == [408], received
        assert took >= _BODY_TIMEOUT * 0.9
        # Gone mid-body: nothing stored, no answer owed.
        reader, writer = await asyncio.open_connection("127.0.0.1", _port(hub))
        writer.write(data[:-10])
        await writer.drain()
        writer.close()
        # Half-closed right after a whole request: stored once (decided before the end).
        # (aiohttp's path closes such a connection unanswered; the lean one answers first.)
        reader, writer = await asyncio.open_connection("127.0.0.1", _port(hub))
        try:
            writer.write(_plain(5))
            writer.write_eof()
            async with asyncio.timeout(10 * TIME_SCALE):
                received = await reader.read()
            assert received == b"" or received.startswith(b"HTTP/1.1 202 "), received
        finally:
            writer.close()
        await wait_for(lambda: lean_served.count("t") == 2)
        await wait_for(lambda: not _serving())
        now = await stored(hub, "t")
        assert now[: len(expected)] == expected and len(now) == len(expected) + 1
        expected = now
        # Headers that never end: closed at the header deadline, unanswered.
        received, took = await _all_answers(hub, _plain(6)[:40])
        assert received == b"" and took >= _HEADER_TIMEOUT * 0.9
        # An idle kept-alive connection after a lean publish: closed at keepalive.
        conn = await Conn.open(hub)
        try:
            started = time.monotonic()
            head, body = await conn.ask(_plain(7))
            assert head.startswith(b"HTTP/1.1 202 ")
            expected += orjson.loads(body)["ids"]
            assert await conn.closed()
            assert time.monotonic() - started >= _KEEPALIVE * 0.9
        finally:
            conn.close()
        assert await stored(hub, "t") == expected
    await dog.sockets_back()


def _id_order(event_id: str) -> tuple[int, int]:
    ms, _, seq = event_id.partition("-")
    return int(ms), int(seq)


#: The ``lean_served`` fixture's spy, which counts the lean publishes being stored.
_SPY: list[LeanSpy] = []


def _serving() -> int:
    return _SPY[-1].in_flight


def _mutate(rng: random.Random, data: bytes) -> bytes:
    return mutate(
        rng,
        data,
        chars=b" :\r\n\t/%?<>\"'\x00\x7fPOSTHP1.",
        headers=[
            b"Authorization: x\r\n",
            b"Content-Length: 5\r\n",
            b"Expect: 100-continue\r\n",
            b"Transfer-Encoding: chunked\r\n",
            b"Idempotency-Key: k\r\n",
            b"Content-Type: text/xml\r\n",
        ],
        splice=40,
        again=True,
    )


@pytest.mark.timeout(300)
async def test_a_seeded_fuzz_of_publishes_stores_exactly_what_was_answered(
    hub: Hub, lean_served: list[str]
) -> None:
    await _warm_up(hub)
    rng = random.Random(22)
    seen: dict[str, int] = {}
    answered: dict[str, list[str]] = {"warm": await stored(hub, "warm")}
    async with Watchdog() as dog:
        for batch in range(10):
            # A few unmutated among them: plain publishes racing hostile ones.
            cases = [
                _mutate(rng, _plain(batch * 100 + i)) if i % 5 else _plain(batch * 100 + i)
                for i in range(30)
            ]
            results = await asyncio.gather(*(_all_answers(hub, c) for c in cases))
            for case, (received, _took) in zip(cases, results, strict=True):
                answers = _responses(received)
                if not answers:  # unanswered: a deadline, or a request still incomplete
                    seen["none"] = seen.get("none", 0) + 1
                for status, body in answers:
                    seen[str(status)] = seen.get(str(status), 0) + 1
                    if status == 202:
                        answer = orjson.loads(body)
                        answered.setdefault(answer["topic"], []).extend(answer["ids"])
                    else:
                        assert 400 <= status < 500 or status == 100, (batch, case, received)
        await wait_for(lambda: not _serving())
        # Nothing half-stored: each stream holds exactly the ids its 202s named.
        found = await _stream_ids(hub)
        expected = {t: sorted(ids, key=_id_order) for t, ids in answered.items() if ids}
        assert found == expected, (found, seen)
    assert seen.get("202", 0) > 60 and sum(v for k, v in seen.items() if k[0] == "4") > 50, seen
    assert len(lean_served) > 60, seen
    await dog.sockets_back()
