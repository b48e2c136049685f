"""Hostile requests for streams of several topics (``/events``, ``/ws``): their parameters
(``topic``, ``topic_prefix``, ``since``, ``Last-Event-ID``, ``access_token``, the filters)
and their composite resume ids are another party's bytes.

Named cases, then a seeded fuzz of the query and of resume ids mutated from real ones, on
raw connections, under the watchdog: every answer a 4xx or a stream (200, 101), no 5xx, no
ERROR log (no traceback), no loop stall, and no socket left behind.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest

from hub.core.read_tokens import mint
from hub.core.settings import Settings
from hub.core.stream_positions import MARK, encode
from hub.store import keys
from hub.store.embedded_redis import EmbeddedRedis
from hub.web.streams import STREAMING
from tests.conftest import Hub, start_hub
from tests.hub.topic_streams import Reader
from tests.support import TIME_SCALE, changes, free_port, notification, wait_for
from tests.watchdog import Watchdog

KEY = "k" * 32
TOPICS = ["h-a", "h-b", "h-c", "pri-x"]
_WS = (
    b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
)


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {
        # A stream whose client left learns it when it next writes: an event, or (one
        # resumed from a time ahead, that has nothing to send yet) a heartbeat.
        "heartbeat_seconds": 0.5,
        "stream_max_topics": 50,
        "stream_max_id_bytes": 2000,
        "topic_read_tokens": {"pri*": ["rp"]},
        "jwt_key": KEY,
        "stream_topic_scan_seconds": 0.2,
    }


def _port(hub: Hub) -> int:
    return int(hub.url.rsplit(":", 1)[1])


def _streams(hub: Hub) -> list[Any]:
    return list(hub.app[STREAMING].closing._streams)


def _request(path: bytes, *, ws: bool = False, extra: bytes = b"") -> bytes:
    return (
        b"GET "
        + path
        + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + (_WS if ws else b"")
        + extra
        + b"\r\n"
    )


async def _answer(hub: Hub, data: bytes) -> bytes:
    """The head of the hub's answer to ``data`` (b"" if it closed without one)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", _port(hub))
    try:
        writer.write(data)
        async with asyncio.timeout(10 * TIME_SCALE):
            try:
                return await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                return exc.partial
            except ConnectionResetError:
                return b""
    finally:
        writer.close()


def _status(head: bytes) -> int:
    match = re.match(rb"HTTP/\d\.\d (\d{3}) ", head)
    assert match, head[:200]
    return int(match[1])


async def _no_streams_left(hub: Hub) -> None:
    """aiohttp's path learns that a client left when it next writes to it: publish until
    every stream has ended."""
    async with asyncio.timeout(30 * TIME_SCALE):
        while streams := _streams(hub):
            for topic in {s.feed.topic for s in streams}:
                assert (await hub.publish(topic, notification(changes(1)))).status == 202
            await asyncio.sleep(0.05)


async def _warm_up(hub: Hub) -> str:
    """Every topic published to, a stream of them opened and left (what stays open on
    purpose: the hub's Redis connections for following them); a real resume id."""
    for topic in TOPICS:
        assert (await hub.publish(topic, notification(changes(2)))).status == 202
    query = "topic_prefix=h-&topic=pri-x&since=0&access_token=rp"
    async with hub.session.get(f"{hub.url}/events?{query}") as resp:
        assert resp.status == 200
        resume = ""
        async with asyncio.timeout(10 * TIME_SCALE):
            while resume.count("\n") < 20:
                resume += (await resp.content.readline()).decode()
    await _no_streams_left(hub)
    ids = re.findall(r"^id: (m1\.\S+)$", resume, re.M)
    assert ids
    return ids[-1]


def _raw_id(data: bytes) -> str:
    return MARK + base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _named(real: str) -> dict[str, bytes]:
    q = quote
    huge_count = _raw_id(b"\x00\x00" + b"\xff" * 9 + b"\x01")
    cases = {
        "no topic": b"/events",
        "empty topic": b"/events?topic=",
        "empty prefix": b"/events?topic_prefix=",
        "commas only": b"/events?topic=,,,",
        "a NUL in a name": b"/events?topic=a%00b",
        "a slash in a name": b"/events?topic=a%2Fb",
        "a long name": b"/events?topic=" + b"a" * 300,
        "unicode name": b"/events?topic=%C3%A9t%C3%A9",
        "over the topic limit": b"/events?topic=" + b",".join(b"t%d" % i for i in range(60)),
        "33 prefixes": b"/events?" + b"&".join(b"topic_prefix=p%d" % i for i in range(33)),
        "a star prefix": b"/events?topic_prefix=*",
        "since garbage": b"/events?topic=h-a&since=%FF%FE",
        "since a plus": b"/events?topic=h-a&since=+5",
        "since a bad time": b"/events?topic=h-a&since=2026-02-30T00:00:00Z",
        "since a time without zone": b"/events?topic=h-a&since=2026-01-01T00:00:00",
        "since the mark only": b"/events?topic=h-a&since=m1.",
        "since a truncated id": b"/events?topic=h-a&since=" + real[:-3].encode(),
        "since an id with a NUL": b"/events?topic=h-a&since=" + q(real + "\x00").encode(),
        "since an id twice": b"/events?topic=h-a&since=" + (real + real[3:]).encode(),
        "an id counting 2**64 topics": b"/events?topic=h-a&since=" + huge_count.encode(),
        "an id over the byte limit": b"/events?topic=h-a&since=m1." + b"A" * 2100,
        "an id far ahead": b"/events?topic=h-a&since="
        + encode((0, 0), {"h-a": (2**63, 0)}).encode(),
        "a plain id far ahead": b"/events?topic_prefix=h-&since=99999999999999-0",
        "a private topic, no token": b"/events?topic=pri-x",
        "a private topic, a wrong token": b"/events?topic=pri-x&access_token=nope",
        "a prefix, a garbage token": b"/events?topic_prefix=h-&access_token=a.b.c",
        "a prefix, an expired token": b"/events?topic_prefix=h-&access_token="
        + mint(KEY, ["h-*"], 1, now=time.time() - 3600).encode(),
        "a bad change filter": b"/events?topic=h-a&change=none",
        "33 resource prefixes": b"/events?topic=h-a&" + b"&".join(b"prefix=x" for _ in range(33)),
        "a websocket, no topic": b"/ws",
        "a websocket, a bad id": b"/ws?topic=h-a&since=m1.!!",
    }
    return cases


async def test_named_hostile_requests(hub: Hub) -> None:
    real = await _warm_up(hub)
    async with Watchdog() as dog:
        for name, path in _named(real).items():
            for ws in (False, True):
                target = path.replace(b"/events", b"/ws", 1) if ws else path
                head = await _answer(hub, _request(target, ws=ws))
                status = _status(head)
                assert 400 <= status < 500, (name, ws, head[:300])
        # A Last-Event-ID that is not ASCII, and one far too long for a header.
        for extra in (
            b"Last-Event-ID: m1.\xff\xfe\r\n",
            b"Last-Event-ID: " + b"A" * 20000 + b"\r\n",
        ):
            head = await _answer(hub, _request(b"/events?topic=h-a", extra=extra))
            assert 400 <= _status(head) < 500, head[:300]
        # The real id resumes; an id of another selection is taken too (for its base: the
        # topics it names that this stream does not follow are left out).
        for path in (
            b"/events?topic_prefix=h-&since=" + real.encode(),
            b"/events?topic=h-a&since=" + real.encode(),
            b"/events?topic=h-a&since=" + encode((0, 0), {"zz": (1, 0)}).encode(),
        ):
            assert _status(await _answer(hub, _request(path))) == 200
        await _no_streams_left(hub)
    await dog.sockets_back()
    assert hub.app[STREAMING].presence.snapshot() == {}


def _mutated_id(rng: random.Random, real: str) -> str:
    data = bytearray(base64.urlsafe_b64decode(real[3:] + "=" * (-len(real[3:]) % 4)))
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(data) + 1)
        what = rng.randrange(4)
        if what == 0 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif what == 1 and data:
            del data[min(at, len(data) - 1)]
        elif what == 2:
            data[at:at] = bytes([rng.choice([0, 1, 0x7F, 0x80, 0xFF])])
        else:
            data = data[: rng.randrange(len(data) + 1)]
    text = _raw_id(bytes(data))
    if rng.random() < 0.2:  # the text itself, not its bytes
        i = rng.randrange(len(text))
        text = text[:i] + rng.choice("=+/%.!~ \x00é") + text[i + 1 :]
    return text


_SINCES = ["0", "1", "5-5", "2020-01-01T00:00:00Z", "2099-01-01T00:00:00+14:00", "-1", "x"]
_VALUES = [
    "h-a",
    "h-b,h-c",
    "h-c",
    "new",
    "pri-x",
    "h-",
    "",
    ",",
    "a" * 130,
    "%00",
    "..",
    "h-a,h-a",
]


def _fuzz_request(rng: random.Random, real: str) -> bytes:
    params: list[tuple[str, str]] = [("topic", "h-a")] if rng.random() < 0.5 else []
    for _ in range(rng.randint(0, 3)):
        params.append(("topic", rng.choice(_VALUES)))
    for _ in range(rng.randint(0, 2)):
        params.append(("topic_prefix", rng.choice(["h-", "h", "p", "", "-", "zz", "pri-"])))
    if rng.random() < 0.6:
        draw = rng.random()
        since = real if draw < 0.3 else rng.choice(_SINCES) if draw < 0.6 else None
        params.append(("since", since or _mutated_id(rng, real)))
    if rng.random() < 0.2:
        params.append(("access_token", rng.choice(["rp", "nope", "a.b.c", ""])))
    if rng.random() < 0.1:
        params.append(("change", rng.choice(["created", "x", ""])))
    query = "&".join(f"{k}={quote(v, safe=',:')}" for k, v in params)
    if rng.random() < 0.1:  # raw bytes in the query
        query += "&topic=" + "".join(chr(rng.randrange(33, 256)) for _ in range(5))
    ws = rng.random() < 0.4
    path = ("/ws" if ws else "/events") + (f"?{query}" if query else "")
    extra = b""
    if rng.random() < 0.2:
        extra = b"Last-Event-ID: " + _mutated_id(rng, real).encode("latin-1", "replace") + b"\r\n"
    return _request(path.encode("utf-8", "surrogateescape"), ws=ws, extra=extra)


@pytest.mark.timeout(300)
async def test_a_seeded_fuzz_of_parameters_and_resume_ids(hub: Hub) -> None:
    real = await _warm_up(hub)
    rng = random.Random(2026)
    seen: dict[str, int] = {}
    async with Watchdog() as dog:
        for _batch in range(12):
            cases = [_fuzz_request(rng, real) for _ in range(25)]
            heads = await asyncio.gather(*(_answer(hub, case) for case in cases))
            for case, head in zip(cases, heads, strict=True):
                status = _status(head)
                assert status in (101, 200) or 400 <= status < 500, (case[:300], head[:300])
                seen[str(status)] = seen.get(str(status), 0) + 1
            await _no_streams_left(hub)
    print(f"\nanswers by status: {dict(sorted(seen.items()))}")
    assert seen.get("200", 0) + seen.get("101", 0) > 20, seen
    assert sum(n for status, n in seen.items() if status.startswith("4")) > 100, seen
    await dog.sockets_back()
    await wait_for(lambda: not hub.app[STREAMING].presence.snapshot())


@pytest.mark.parametrize("damage", ["a hash", "not a number"])
async def test_a_damaged_topic_names_version_leaves_prefix_streams_working(
    hub: Hub, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``rshub:topics:version`` holding what the hub did not write: publishes of new topics
    go on, and prefix streams read the whole set of names each time (said once)."""
    if damage == "a hash":
        await hub.redis.hset(keys.TOPICS_VERSION, "x", "y")
    else:
        await hub.redis.set(keys.TOPICS_VERSION, "x")
    async with Watchdog():
        async with hub.session.get(f"{hub.url}/events?topic_prefix=v-") as resp:
            assert resp.status == 200
            reader = Reader()
            async with asyncio.timeout(20 * TIME_SCALE):
                reading = asyncio.create_task(reader.sse(resp, reader.count(2)))
                await reader.opened.wait()
                for topic in ("v-1", "v-2"):  # first published now: found by the names
                    assert (await hub.publish(topic, notification(changes(1)))).status == 202
                await reading
        assert sorted(t for t, _i in reader.pairs()) == ["v-1", "v-2"]
    said = [r.getMessage() for r in caplog.records if "topics:version" in r.getMessage()]
    assert said and all("damaged" in m for m in said), said
    assert len(set(said)) == len(said)


@pytest.mark.timeout(120)
async def test_redis_down_is_a_503_then_streams_of_several_topics_serve_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Opening one needs Redis (the names, each topic's feed): while it is down, 503 and no
    traceback; once it is back, it streams."""
    caplog.set_level(logging.WARNING)
    redis = EmbeddedRedis(tmp_path / "redis", appendfsync="always")
    redis.start()
    settings = Settings(host="127.0.0.1", port=free_port())
    runner, _app = await start_hub(settings, redis.url)
    url = f"{settings.public_url}/events?topic_prefix=o-&topic=o-1"
    try:
        async with aiohttp.ClientSession() as session:
            redis.stop()
            async with session.get(url) as resp:
                assert resp.status == 503, await resp.text()
            redis.start()  # same port and data

            async def streams() -> bool:
                async with session.get(url) as resp:
                    return resp.status == 200

            await wait_for(streams, timeout=30, interval=0.2)
    finally:
        await runner.cleanup()
        redis.stop()
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
