"""A plain WebSub topic's content is another party's bytes: hostile answers to the ping's GET.

The hub fetches a pinged plain topic (:mod:`hub.live.content_publication`) through the one
outgoing client, so the answer is bounded like every other: ``max_body_bytes``, the whole
answer within ``verify_timeout``, no redirect followed, the address rules. On top, the
content's own rules: one media type of at most 512 characters as ``Content-Type``, no
content coding, not empty. Named cases (played by :class:`HostileCallback` on a raw socket)
then a seeded fuzz of answers, each under the :class:`Watchdog`: the pinging publisher gets
a clear ``4xx``/``502`` naming the problem, nothing is stored, and the loop never stalls.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from hub.core.topic_content import content_type_problem
from hub.store import keys
from tests.conftest import Hub
from tests.hub.hostile_callback import Answer, HostileCallback, Play
from tests.hub.test_hostile_answers import CHUNKED, drips, mutate
from tests.hub.test_hostile_gets import _warm, answers, dripped
from tests.support import TIME_SCALE, wait_for
from tests.watchdog import Watchdog

LIMIT = 64 * 1024


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    # Every topic URL on 127.0.0.1 (the hostile sources') is a plain topic.
    return {
        "verify_timeout": 1.0,
        "max_body_bytes": LIMIT,
        "websub_topics": ["http://127.0.0.1:"],
        "ping_rate_per_second": 0,  # no limit: the fuzz pings as fast as it can
    }


def _head(length: int, headers: bytes = b"Content-Type: text/plain\r\n") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n" % (length, headers)


def _answer(headers: bytes, body: bytes = b"content") -> bytes:
    return _head(len(body), headers) + body


def _redirect(to: bytes) -> Play:
    return answers(
        lambda _: b"HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % to,
        close=True,
    )


async def ping(hub: Hub, url: str) -> tuple[int, dict[str, Any]]:
    form = {"hub.mode": "publish", "hub.url": url}
    async with hub.session.post(f"{hub.url}/", data=form) as resp:
        return resp.status, await resp.json()


async def stored_nothing(hub: Hub) -> bool:
    return not await hub.redis.keys(keys.events("*")) and not await hub.redis.keys(
        keys.content("*")
    )


BIG = b"x" * (1 << 20)

#: name: (the answer to the ping's GET, the hub's status, what its answer says: the error,
#: or for a 202 the Content-Type stored).
CASES: dict[str, tuple[Play, int, str]] = {
    "a_huge_content_type": (
        answers(
            lambda _: _answer(b"Content-Type: text/plain; x=" + b"a" * 60_000 + b"\r\n"), close=True
        ),
        502,
        "unusable Content-Type: it is longer than 512 characters",
    ),
    "a_content_type_not_in_ascii": (
        answers(lambda _: _answer(b"Content-Type: text/pl\xe9in\r\n"), close=True),
        502,
        "is not one media type",
    ),
    "two_content_types": (
        answers(
            lambda _: _answer(b"Content-Type: text/plain\r\nContent-Type: text/html\r\n"),
            close=True,
        ),
        502,
        "is not one media type",
    ),
    "a_content_coding_not_asked_for": (
        answers(
            lambda _: _answer(b"Content-Type: text/plain\r\nContent-Encoding: gzip\r\n"), close=True
        ),
        502,
        "Content-Encoding 'gzip'",
    ),
    "an_empty_body": (
        answers(lambda _: _answer(b"Content-Type: text/plain\r\n", b""), close=True),
        502,
        "empty body",
    ),
    "a_megabyte_past_the_limit": (
        dripped(_head(len(BIG)), BIG, 16 * 1024, 0.01),
        413,
        f"larger than the {LIMIT}-byte publish limit",
    ),
    "a_body_that_never_ends": (
        drips(CHUNKED, b"1\r\nx\r\n", 0.05),
        502,
        "answer's body not complete within 1 s",
    ),
    "a_lying_content_length": (
        answers(lambda _: _head(70) + b"content"),  # and the connection kept open
        502,
        "answer's body not complete within 1 s",
    ),
    "no_content_type": (
        answers(lambda _: _answer(b""), close=True),
        202,
        "application/octet-stream",
    ),
    "a_folded_content_type": (
        answers(lambda _: _answer(b"Content-Type: text/plain;\r\n charset=utf-8\r\n"), close=True),
        202,
        "text/plain; charset=utf-8",
    ),
}


@pytest.mark.parametrize("name", CASES)
async def test_a_hostile_topic_answer(hub: Hub, redis_url: str, name: str) -> None:
    play, status, says = CASES[name]
    source = await HostileCallback(play, get=play).start("/feed")
    try:
        await _warm(hub)
        async with Watchdog() as dog:
            got, body = await ping(hub, source.url)
            assert got == status, body
            if status == 202:
                assert body["content_type"] == says and body["accepted"] == 1, body
            else:
                assert says in body["error"] and source.url in body["error"], body
                assert await stored_nothing(hub)
            if status == 413:  # cut at the limit: the hub closed the connection
                await wait_for(lambda: source.lost >= 1, 5 * TIME_SCALE)
        await dog.sockets_back()
    finally:
        await source.stop()


async def test_a_redirect_to_a_private_address_is_not_followed(hub: Hub) -> None:
    """The hub allows loopback here (the tests' sites), yet follows no redirect: neither to
    a private address nor to the trap on loopback it also names."""
    served = answers(lambda _: _answer(b"Content-Type: text/plain\r\n"), close=True)
    trap = await HostileCallback(served, get=served).start()
    moves = [b"http://10.0.0.1/feed", trap.url.encode(), b"http://169.254.169.254/latest"]
    sources = [await HostileCallback(served, get=_redirect(to)).start("/feed") for to in moves]
    try:
        async with Watchdog():
            for source in sources:
                status, body = await ping(hub, source.url)
                assert status == 502, body
                assert "gave HTTP 302 (redirects are not followed)" in body["error"], body
        assert trap.targets == [] and await stored_nothing(hub)
    finally:
        for server in [trap, *sources]:
            await server.stop()


class TestPrivateAddresses:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"websub_topics": ["http://127.0.0.1:"], "allow_private_callbacks": False}

    async def test_a_plain_topic_on_a_private_address_is_never_fetched(self, hub: Hub) -> None:
        served = answers(lambda _: _answer(b"Content-Type: text/plain\r\n"), close=True)
        source = await HostileCallback(served, get=served).start("/feed")
        try:
            status, body = await ping(hub, source.url)
            assert status == 400 and "hub.url" in body["error"] and "loopback" in body["error"]
            assert source.targets == [] and await stored_nothing(hub)
        finally:
            await source.stop()


# -- a seeded fuzz of topic answers ---------------------------------------------------------

#: Answers to mutate, each with the Content-Type the hub must store from it unmutated.
SEEDS = [
    (_answer(b"Content-Type: text/plain;charset=UTF-8\r\n", b"one"), "text/plain;charset=UTF-8"),
    (_answer(b"Content-Type: application/json\r\n", b'{"a": 1}'), "application/json"),
    (
        _answer(b'Content-Type: multipart/mixed; boundary="x;y"\r\n', b"--x;y--"),
        'multipart/mixed; boundary="x;y"',
    ),
    (
        CHUNKED.replace(b"\r\n\r\n", b"\r\nContent-Type: text/html; charset=UTF-8\r\n\r\n")
        + b"5\r\n<p>x<\r\n0\r\n\r\n",
        "text/html; charset=UTF-8",
    ),
    (b"HTTP/1.0 200 OK\r\nContent-Type: text/csv\r\n\r\na,b\r\n", "text/csv"),
]


def _fuzzed(rng: random.Random) -> tuple[bytes, str | None]:
    """An answer, and the Content-Type the hub stores from it when it is a seed's."""
    seed, ctype = rng.choice(SEEDS)
    draw = rng.random()
    if draw < 0.2:
        return seed, ctype
    if draw < 0.5:  # a Content-Type of random ASCII and Latin-1 bytes
        alphabet = b'ab/;= \t"\\,\xe9\x00xxxxxxxx'
        value = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        return _answer(b"Content-Type: " + value + b"\r\n"), None
    return mutate(rng, seed), None


async def test_a_seeded_fuzz_of_1000_topic_answers(hub: Hub) -> None:
    rng = random.Random(20261202)
    drawn = [_fuzzed(rng) for _ in range(1000)]
    replies = [reply for reply, _ in drawn]

    async def play(answer: Answer) -> None:
        answer.write(replies.pop(0))
        answer.close()

    good = _answer(b"Content-Type: text/plain\r\n", b"healthy")
    source = await HostileCallback(play, get=play).start("/feed")
    healthy = await HostileCallback(play, get=answers(lambda _: good, close=True)).start("/ok")
    outcomes: dict[int, int] = {}
    try:
        async with Watchdog():
            for n, (_, seed_type) in enumerate(drawn):
                status, body = await ping(hub, source.url)
                outcomes[status] = outcomes.get(status, 0) + 1
                if seed_type is not None:  # a seed as it is: taken, its type byte for byte
                    assert status == 202 and body["content_type"] == seed_type, (n, body)
                elif status == 202:
                    assert content_type_problem(body["content_type"]) is None, body
                    assert 0 < body["length"] <= LIMIT, body
                else:
                    assert status in (413, 502), (n, status, body)
                    assert source.url in body["error"], body
                if n % 50 == 0:  # a healthy topic on the same hub keeps being served
                    assert (await ping(hub, healthy.url))[0] == 202
    finally:
        await source.stop()
        await healthy.stop()
    assert len(source.targets) == 1000  # every answer was asked for
    assert outcomes.get(202, 0) > 200 and outcomes.get(502, 0) > 200, outcomes
