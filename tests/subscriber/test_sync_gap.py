"""``rshub sync --via webhook`` re-baselines from the Resource List when the hub says it
trimmed changes before delivering them (``X-RSHub-Gap``), instead of going on without them.

Real parts: an in-process hub on the session's Redis, a real Source, ``rshub sync`` as a
child process with its own WebSub callback, a real mirror directory. The hub is stopped
while the changes are published (through the hub's own parser and store, straight into
Redis), so when it comes back its delivery worker reads them from Redis, where retention
(5 events, no hold) already trimmed the first of them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis.asyncio as redis

from hub.core.events import changes_from_document
from hub.core.settings import Settings
from hub.store.event_store import EventStore, Retention
from hub.store.subscriptions import SubscriptionStore
from subscriber.events import event_order
from subscriber.position import EventCursorFile
from tests.conftest import start_hub
from tests.support import free_port, notification, wait_for

from .helpers import Child, expected_files, mirror_files, publish
from .source import TestSource

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def source() -> AsyncIterator[TestSource]:
    src = TestSource()
    await src.start()
    yield src
    await src.stop()


async def _store_publish(store: EventStore, change: dict[str, Any]) -> str:
    """One publish while no hub serves requests: the hub's parser, the hub's store."""
    parsed = changes_from_document(notification([change]), 1 << 20)
    [event_id] = (await store.append("docs", parsed)).ids
    return event_id


async def test_a_gap_notice_makes_sync_rebaseline_from_the_resource_list(
    tmp_path: Path, redis_url: str, source: TestSource
) -> None:
    settings = Settings(
        host="127.0.0.1",
        port=free_port(),
        allow_private_callbacks=True,
        retention_max_events=0,
        topic_retention_max_events={"docs": 5},
        retention_hold_max_events=0,
        ownership_lease_seconds=0.5,
        retry_base_seconds=0.05,
        retry_max_seconds=0.2,
    )
    dest = tmp_path / "mirror"

    def converged() -> bool:
        return mirror_files(dest) == expected_files(source.url, source.files)

    def baseline_at() -> datetime | None:
        """The instant the last baseline holds every change before (the position's)."""
        return EventCursorFile(dest / ".rshub" / "state.json").load().baseline_at

    runner, _ = await start_hub(settings, redis_url)
    client = redis.Redis.from_url(redis_url)
    store = EventStore(client, retention=Retention(topic_max_events={"docs": 5}))
    child = Child(
        tmp_path / "sync.log",
        "sync",
        "--dest",
        str(dest),
        "--hub",
        settings.public_url,
        "--topic",
        "docs",
        "--via",
        "webhook",
        "--interval",
        "60",  # the hub's short absence below goes unnoticed by the health check
        "--no-progress",
        "-v",
    )
    try:
        async with aiohttp.ClientSession() as session:
            first = [source.put(f"d{i}", f"first {i}".encode()) for i in range(3)]
            await publish(session, settings.public_url, "docs", [*first, source.put("old", b"o")])
            child.start()
            await wait_for(converged, 20)

            async def subscribed() -> bool:
                return bool(await SubscriptionStore(client).for_topic("docs"))

            await wait_for(subscribed, 20)
            await wait_for(lambda: baseline_at() is not None, 20)
            first_at = baseline_at()
        await runner.cleanup()
        runner = None

        # While the hub is down: r1-r3 (a deletion, two new files) are trimmed by r4-r8.
        ids = [await _store_publish(store, source.delete("old"))]
        ids.append(await _store_publish(store, source.put("a1", b"a1")))
        ids.append(await _store_publish(store, source.put("a2", b"a2")))
        for i in range(4, 9):
            ids.append(await _store_publish(store, source.put(f"b{i}", f"b{i}".encode())))
        assert await store.trimmed_through("docs") == ids[2]

        runner, _ = await start_hub(settings, redis_url)
        # The lost deletion and creations are only in the Resource List.
        await wait_for(lambda: converged() and "re-baseline:" in child.log(), 30)
        assert f"trimmed changes through {ids[2]}" in child.log(), child.log()[-3000:]
        assert child.stop() == 130, child.log()[-3000:]
        # The re-baseline moved the instant its baseline holds every change before: past
        # the lost changes, which only its Resource List had.
        again, lost = baseline_at(), event_order(ids[2])
        assert first_at is not None and again is not None and lost is not None
        assert again > first_at and again >= datetime.fromtimestamp(lost[0] / 1000, UTC)
    finally:
        if child.proc is not None and child.proc.poll() is None:
            child.stop()
        if runner is not None:
            await runner.cleanup()
        await store.close()
        await client.aclose()


# -- the receiver: where the hub's bytes enter the subscriber ---------------------------------

RL = "http://hub.invalid/topics/t/resourcelist.xml"


def _body(trimmed: str | None = "5-0", resourcelist: str | None = RL, entries: int = 1) -> bytes:
    links = f'<rs:ln rel="resourcelist" href="{resourcelist}"/>' if resourcelist else ""
    gap = f' rshub:trimmed-through="{trimmed}"' if trimmed is not None else ""
    urls = "".join(
        f"<url><loc>http://example.org/r{i}</loc><lastmod>2026-01-01T00:00:00Z</lastmod>"
        f'<rs:md change="updated" rshub:id="9-{i}"/></url>'
        for i in range(entries)
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<urlset'
        ' xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        ' xmlns:rs="http://www.openarchives.org/rs/terms/" xmlns:rshub="urn:rshub:1">'
        f'{links}<rs:md capability="changelist-notification"{gap}/>{urls}</urlset>'
    ).encode()


@pytest.fixture
async def receiver() -> AsyncIterator[Any]:
    from subscriber.callback import CallbackReceiver

    async with aiohttp.ClientSession() as session:
        rx = CallbackReceiver(session, "http://hub.invalid", "t", queue_size=10_000)
        await rx.start()  # listening; nothing subscribed (the hub is .invalid)
        # Deliveries come on connections of their own, closed after each answer, so the
        # watchdog's socket count is back where it was at the end.
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True)
        ) as posting:
            yield rx, posting
        await rx.close()


async def _post(
    session: aiohttp.ClientSession, rx: Any, body: bytes, *, sign: bool = True, **headers: str
) -> int:
    from subscriber.websub import sign as signature

    if sign:
        headers["X-Hub-Signature"] = signature(rx.secret, body)
    async with session.post(rx.callback_url, data=body, headers=headers) as resp:
        return resp.status


def _queued(rx: Any) -> list[Any]:
    out = []
    while not rx._queue.empty():
        out.append(rx._queue.get_nowait())
    return out


async def test_receiver_reads_the_gap_from_the_signed_body_only(receiver: Any) -> None:
    from subscriber import ChangesTrimmed, Gap
    from tests.watchdog import Watchdog

    rx, session = receiver
    async with Watchdog() as dog:
        # A signed gap notice: the Gap comes first, then the delivery's changes.
        assert await _post(session, rx, _body()) == 204
        items = rx.deliveries()
        assert await items.__anext__() == Gap("5-0", RL)
        assert [e.id for e in await items.__anext__()] == ["9-0"]
        await items.aclose()
        # A gap claimed in the body of a delivery whose signature is wrong: dropped.
        assert await _post(session, rx, _body("7-0"), sign=False) == 202
        assert rx.rejected == 1
        # The header alone is not signed: no gap without the body saying so.
        assert (
            await _post(session, rx, _body(None), **{"X-RSHub-Gap": "trimmed-through=8-0"}) == 204
        )
        assert all(not isinstance(i, Gap) for i in _queued(rx))
        # Without a resourcelist link the gap is still a gap.
        assert await _post(session, rx, _body("6-0", None, entries=0)) == 204
        # batches() (no re-baselining caller) raises instead of going on.
        with pytest.raises(ChangesTrimmed) as caught:
            async for _batch in rx.batches():
                pass
        assert caught.value.status == 410 and caught.value.trimmed_through == "6-0"
    await dog.sockets_back()


async def test_receiver_fuzz_of_signed_gap_bodies(receiver: Any) -> None:
    """Seeded mutations of a gap notice, signed (a signature is no defence against the
    hub's own bugs): a 2xx or a 400, never a 5xx, and a Gap only with a trimmed-through."""
    import random

    from subscriber import Gap
    from tests.watchdog import Watchdog

    rx, session = receiver
    rng = random.Random(20261124)
    base = _body("123-4", entries=3)
    seen: dict[int, int] = {}
    gaps = 0
    async with Watchdog() as dog:
        for _ in range(300):
            data = bytearray(base)
            for _ in range(rng.randint(1, 6)):
                at = rng.randrange(len(data))
                choice = rng.random()
                if choice < 0.4:
                    data[at] = rng.randrange(256)
                elif choice < 0.7:
                    del data[at : at + rng.randint(1, 40)]
                else:
                    data[at:at] = rng.choice([b'"', b"<", b"&#0;", b"\xff", b"rshub:x", b"\n" * 9])
            status = await _post(session, rx, bytes(data))
            assert status in (204, 400), status
            seen[status] = seen.get(status, 0) + 1
            for item in _queued(rx):
                if isinstance(item, Gap):
                    gaps += 1
                    assert item.trimmed_through  # from the body's attribute, never empty
        assert seen.get(204) and seen.get(400) and gaps, (seen, gaps)  # both paths were taken
    await dog.sockets_back()
