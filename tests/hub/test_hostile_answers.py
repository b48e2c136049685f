"""Hostile answers to deliveries: a real hub, a hostile callback and a healthy one per case.

Each case plays one hostile answer to every delivery POST (:mod:`tests.hub.hostile_callback`)
while a healthy subscriber shares the topic, under the :class:`Watchdog`: the loop never
stalls, the healthy subscriber gets every change, the hostile subscription's outcome is the
expected one (accepted, or failed with a reason in ``last_error``), and once the hostile
subscription ends every socket is closed again. Then a seeded fuzz of 5,000 mutated answers
runs against the delivery client directly.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from hub.core.exceptions import CallbackFailed
from hub.live.callback_connections import CallbackConnections
from hub.web.app import RUNTIME
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.hostile_callback import Answer, HostileCallback, Play
from tests.hub.test_callback_connections import ScriptedServer
from tests.support import changes, notification, wait_for
from tests.watchdog import Watchdog


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    # 1 s for a head and again for a body drain; quick retries
    return {"delivery_timeout": 1.0, "retry_base_seconds": 0.05, "retry_max_seconds": 0.2}


@pytest.fixture
async def healthy() -> AsyncIterator[CallbackServer]:
    server = await CallbackServer().start()
    yield server
    await server.stop()


def writes(data: bytes, *, close: bool = False) -> Play:
    async def play(answer: Answer) -> None:
        answer.write(data)
        if close:
            answer.close()

    return play


def drips(head: bytes, piece: bytes, every: float, limit: int = 400) -> Play:
    """``head``, then ``piece`` every ``every`` seconds (bounded) while the hub listens."""

    async def play(answer: Answer) -> None:
        answer.write(head)
        for _ in range(limit):
            if not answer.open:
                return
            answer.write(piece)
            await asyncio.sleep(every)

    return play


def status_line_dripped(answer: bytes) -> Play:
    async def play(a: Answer) -> None:
        for i in range(len(answer)):
            if not a.open:
                return
            a.write(answer[i : i + 1])
            await asyncio.sleep(1.0)

    return play


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


@dataclass(frozen=True)
class Case:
    play: Play
    #: The answer counts (2xx at its head); else the delivery fails with ``error``.
    accepted: bool
    error: str = ""
    #: The hub must close the connection (a body it cannot or will not drain).
    closes: bool = False


CASES = {
    "negative_chunk_size": Case(writes(CHUNKED + b"-6\r\nabc\r\n"), True, closes=True),
    "chunk_size_of_20_digits": Case(
        writes(CHUNKED + b"9" * 20 + b"\r\nabc\r\n"), True, closes=True
    ),
    "content_length_lies_short": Case(
        writes(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhello world"), True, closes=True
    ),
    "content_length_lies_long": Case(
        writes(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\nabc"), True, closes=True
    ),
    "body_that_never_ends": Case(drips(CHUNKED, b"1\r\nx\r\n", 0.05), True, closes=True),
    "ten_thousand_100_continue": Case(
        writes(b"HTTP/1.1 100 Continue\r\n\r\n" * 10_000 + b"HTTP/1.1 204 No Content\r\n\r\n"),
        False,
        r"interim \(1xx\) answers|response head longer",
    ),
    "one_megabyte_header": Case(
        writes(b"HTTP/1.1 204 No Content\r\nX-Big: " + b"a" * 1_000_000 + b"\r\n\r\n"),
        False,
        "response head longer than 65536 bytes",
    ),
    "status_line_dripped_a_byte_a_second": Case(
        status_line_dripped(b"HTTP/1.1 204 No Content\r\n\r\n"), False, "no answer within 1 s"
    ),
    "invalid_status_line": Case(
        writes(b"HTTP/1.1 2x4 Nope\r\nContent-Length: 0\r\n\r\n"), False, "malformed status code"
    ),
    "http_0_9_body_without_status_line": Case(
        writes(b"<html>thanks</html>", close=True), False, "malformed status line"
    ),
    "early_close": Case(writes(b"HTTP/1.1 204 No", close=True), False, "closed before an answer"),
    "folded_headers": Case(
        writes(b"HTTP/1.1 204 No Content\r\nX-Note: one\r\n two\r\n\tthree\r\nServer: x\r\n\r\n"),
        True,
    ),
    "bare_lf_head": Case(writes(b"HTTP/1.1 204 No Content\nX-Note: one\nServer: x\n\n"), True),
}


def peers(port: int | None) -> list[tuple[int, int]]:
    """This process's TCP sockets (local port, remote port) with ``port`` at either end."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            inodes.add(os.readlink(f"/proc/self/fd/{fd}")[8:-1])
        except OSError:
            pass
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[9] in inodes and fields[3] != "0A":  # 0A: listening
                    ends = (
                        int(fields[1].rsplit(":", 1)[1], 16),
                        int(fields[2].rsplit(":", 1)[1], 16),
                    )
                    if port in ends:
                        found.append(ends)
    return found


async def subscribe(hub: Hub, callback: str) -> None:
    form = {"hub.mode": "subscribe", "hub.topic": f"{hub.url}/topics/t", "hub.callback": callback}
    resp = await hub.session.post(hub.url + "/", data=form)
    assert resp.status == 202, await resp.text()
    await wait_for(lambda: ("t", callback) in hub.app[RUNTIME].delivery.workers)


async def publish(hub: Hub, start: int) -> list[str]:
    resp = await hub.publish("t", notification(changes(1, start=start)))
    return list((await resp.json())["ids"])


@pytest.mark.parametrize("name", CASES)
async def test_hostile_answer(hub: Hub, redis_url: str, healthy: CallbackServer, name: str) -> None:
    case = CASES[name]
    hostile = await HostileCallback(case.play).start()
    try:
        await subscribe(hub, healthy.url)
        published = await publish(hub, 0)
        await wait_for(lambda: healthy.ids == published)  # its connection is warm
        await subscribe(hub, hostile.url)
        worker = hub.app[RUNTIME].delivery.workers[("t", hostile.url)]
        async with Watchdog() as dog:
            published += await publish(hub, 1)
            await wait_for(lambda: len(hostile.posts) >= 1)
            published += await publish(hub, 2)
            await wait_for(lambda: len(hostile.posts) >= 2)
            await wait_for(lambda: healthy.ids == published)
            if case.accepted:  # each POST carried new events: none was retried
                await wait_for(lambda: len(set(hostile.posts)) >= 2)
                assert len(set(hostile.posts)) == len(hostile.posts), hostile.posts
                assert worker.sub.failures == 0 and worker.sub.last_error is None
            else:
                assert len(set(hostile.posts)) == 1, hostile.posts  # the first batch, retried
                await wait_for(lambda: worker.sub.failures >= 2)
                assert re.search(case.error, worker.sub.last_error or ""), worker.sub.last_error
            if case.closes:  # closed by the hub: the callback's side ends within the drain
                await wait_for(lambda: hostile.lost >= 2, 5)
            hostile.finish = True  # the next POST ends the subscription (410)
            published += await publish(hub, 3)
            await wait_for(lambda: ("t", hostile.url) not in hub.app[RUNTIME].delivery.workers)
            await wait_for(lambda: healthy.ids == published)
        # The hub's Redis pool may have grown by a connection under the extra load.
        await dog.sockets_back()
        await wait_for(lambda: not peers(hostile.port), 5)  # its last connection closing
    finally:
        await hostile.stop()


# -- a seeded fuzz of answers, against the delivery client directly ---------------------

SEEDS = [
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    b"HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n",
    b"HTTP/1.1 204 No Content\r\nRetry-After: 7\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
    b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 503 Busy\r\nRetry-After: 1\r\nConnection: close\r\n\r\nbody until close",
    b"HTTP/1.1 204 No Content\r\nX-Note: one\r\n two\r\n\r\n",
    b"HTTP/1.1 204 No Content\nX-A: b\n\n",
]
SEED_STATUS = [200, 202, 204, 204, 200, 503, 204, 204]
NASTY = [b"-", b"\r\n", b"\n", b" ", b"\t", b":", b";", b"0", b"ffffffffffffffffffff", b"\x00"]
NASTY += [b"\xff", b"HTTP/1.1 ", b"100", b"Content-Length: ", b"Transfer-Encoding: chunked"]


def mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randint(0, len(out))
        op = rng.randrange(6)
        if op == 0 and out:  # flip a byte
            out[min(at, len(out) - 1)] = rng.randrange(256)
        elif op == 1:  # insert a nasty token
            out[at:at] = rng.choice(NASTY)
        elif op == 2:  # delete a range
            del out[at : at + rng.randint(1, 8)]
        elif op == 3:  # duplicate a range
            out[at:at] = out[at : at + rng.randint(1, 40)]
        elif op == 4:  # truncate
            del out[at:]
        else:  # a number replaced by another, maybe huge or negative
            numbers = list(re.finditer(rb"\d+", bytes(out)))
            if numbers:
                m = rng.choice(numbers)
                value = rng.choice([b"-1", b"-6", b"0", b"99999999999999999999", b"1e3", b"1"])
                out[m.start() : m.end()] = value
    return bytes(out)


async def test_a_seeded_fuzz_of_5000_answers() -> None:
    rng = random.Random(20261124)
    replies: list[bytes | None] = []
    expected: list[int | None] = []  # the status of an unmutated answer, else None
    for _ in range(5000):
        i = rng.randrange(len(SEEDS))
        if rng.random() < 0.1:
            replies.append(SEEDS[i])
            expected.append(SEED_STATUS[i])
        else:
            replies.append(mutate(rng, SEEDS[i]))
            expected.append(None)
    fuzz = ScriptedServer(list(replies), close_after_reply=True)
    healthy = ScriptedServer([b"HTTP/1.1 204 No Content\r\n\r\n"] * 100)
    async with Watchdog() as dog:
        url, good = await fuzz.start(), await healthy.start()
        pool = CallbackConnections(allow_private=True)
        outcomes = {"answered": 0, "failed": 0}
        try:
            for n, want in enumerate(expected):
                try:
                    status, _headers = await pool.post(url, b"<x/>", {}, 2.0)
                except CallbackFailed:
                    assert want is None, (n, replies[n])
                    outcomes["failed"] += 1
                else:
                    assert want is None or status == want, (n, replies[n], status)
                    assert 100 <= status <= 999
                    outcomes["answered"] += 1
                if n % 50 == 0:  # a healthy callback on the same pool keeps being served
                    assert (await pool.post(good, b"<x/>", {}, 2.0))[0] == 204
        finally:
            await pool.close()
            fuzz.server.close()
            healthy.server.close()
        assert len(fuzz.requests) == 5000  # every answer was asked for: none was skipped
        assert outcomes["answered"] > 500 and outcomes["failed"] > 500, outcomes
    await dog.sockets_back()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/uni/ā中",  # a raw IRI, as stored before IRIs were converted
        "http://127.0.0.1:9/lone/\ud800",  # not even UTF-8
        "http://\u2603\u2603.invalid/cb",  # no IDN
        "http://[::1/cb",
        "http://cb.invalid:99999/",
        "ftp://cb.invalid/",
    ],
)
async def test_an_odd_callback_url_fails_its_delivery_and_raises_nothing_else(url: str) -> None:
    pool = CallbackConnections(allow_private=True)
    try:
        with pytest.raises(CallbackFailed):
            await pool.post(url, b"<x/>", {"Link": "<http://example.org/中>"}, 2.0)
    finally:
        await pool.close()


async def test_an_unexpected_error_in_a_delivery_is_a_failure_that_backs_off(
    hub: Hub, healthy: CallbackServer, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """Fault injection: whatever a POST raises, the worker retries it with back-off and one
    WARNING line per attempt; it never dies and restarts (a crash loop of ERROR lines)."""
    await subscribe(hub, healthy.url)
    real = CallbackConnections.post
    left = [3]

    async def broken(self: CallbackConnections, url: str, *args: Any) -> Any:
        if left[0] > 0:
            left[0] -= 1
            raise RuntimeError("injected")
        return await real(self, url, *args)

    real_finish = CallbackConnections.finish

    async def broken_finish(self: CallbackConnections, started: Any) -> Any:
        # The answer to a POST the feed's fan-out began (DeliveryWorker.offer).
        if left[0] > 0:
            left[0] -= 1
            self.abandon(started)
            raise RuntimeError("injected")
        return await real_finish(self, started)

    monkeypatch.setattr(CallbackConnections, "post", broken)
    monkeypatch.setattr(CallbackConnections, "finish", broken_finish)
    worker = hub.app[RUNTIME].delivery.workers[("t", healthy.url)]
    async with Watchdog(max_errors=0):
        published = await publish(hub, 0)
        await wait_for(lambda: healthy.ids == published)
        await wait_for(lambda: worker.sub.failures == 0)  # the success reset them
    warnings = [r for r in caplog.records if "failed unexpectedly" in r.getMessage()]
    assert [r.levelname for r in warnings] == ["WARNING"] * 3
    assert "RuntimeError: injected" in warnings[0].getMessage()
    assert hub.app[RUNTIME].delivery.workers[("t", healthy.url)] is worker  # the same worker, alive
