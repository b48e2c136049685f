"""The packed format between its two sides, and the one path from a publish to the feed.

:mod:`hub.core.packed` encodes and decodes ``loc NUL change NUL json NUL``; the append
script (``hub/store/scripts/append.lua``) decodes it on its own. Here Python's packing goes
through the real script on a real Redis and is read back from the stream and the Resource
List fold, odd bytes included; a seeded hypothesis run holds ``pack``/``unpack`` together.
Then :class:`hub.live.ingest.Ingest`: appending returns the stored events, the process's own
feed takes them at once when they follow on, and never out of order or twice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from hub.core import resource_states
from hub.core.events import Change
from hub.core.packed import Packed, pack, pack_nul_free, stored_json, unpack
from hub.core.tasks import Tasks, cancel_and_wait
from hub.live.feed import FeedHub
from hub.live.ingest import Ingest
from hub.store import keys
from hub.store.event_store import EventStore, Retention


def _change(loc: str, kind: str = "updated", **extra: Any) -> Change:
    return Change(loc, kind, orjson.dumps({"loc": loc, "change": kind, **extra}))


ODD = [
    _change("http://example.org/ä/中文/😀?q=ü#frag"),
    _change("http://example.org/\"quoted\"/'single'/back\\slash", note='"a" \\ \u2028 \x01'),
    _change("http://example.org/long", text="x" * 200_000, links=[{"rel": "a", "href": "é"}]),
    _change("http://example.org/ä/中文/😀?q=ü#frag", "deleted"),  # the fold drops it again
    _change(
        "http://example.org/spaces%20and%2Fescapes",
        "created",
        lastmod="2026-11-24T10:00:00.5Z",
        length=0,
        links=[{"rel": "a", "href": "é"}],
    ),
]


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Any]:
    redis = aioredis.Redis.from_url(redis_url)
    yield redis
    await redis.aclose()


async def test_packed_changes_read_back_from_the_real_script_as_packed(client: Any) -> None:
    store = EventStore(client)
    try:
        packed = pack(ODD)
        stored = await store.append("t", packed)
    finally:
        await store.close()
    rows = await client.xrange(keys.events("t"))
    assert [r[0].decode() for r in rows] == stored.ids
    assert [r[1][b"e"] for r in rows] == [c.event for c in ODD]  # byte for byte
    assert [(e.id, e.data) for e in stored.events] == [(r[0].decode(), r[1][b"e"]) for r in rows]
    fold = {k.decode(): v for k, v in (await client.hgetall(keys.resources("t"))).items()}
    # The script split loc and change type where Python packed them: the deleted change
    # took its loc out again, the others are there under their exact (UTF-8) loc.
    assert sorted(fold) == sorted({ODD[1].loc, ODD[2].loc, ODD[4].loc})
    for i in (1, 2, 4):  # the state the Resource List reads: packed where it packs
        assert fold[ODD[i].loc] == resource_states.encode(stored.ids[i], ODD[i].event)
    assert fold[ODD[4].loc][0] == resource_states.FORMAT  # created, with a lastmod
    assert fold[ODD[1].loc] == stored.ids[1].encode() + b" " + ODD[1].event  # no lastmod
    assert stored.previous_id == "" and not stored.replayed
    assert unpack(packed) == [tuple(c) for c in ODD]


def test_a_nul_in_a_field_is_refused_not_misframed() -> None:
    with pytest.raises(ValueError, match="NUL"):
        pack([Change("http://example.org/a\0b", "updated", b"{}")])
    with pytest.raises(ValueError, match="not 2 packed changes"):
        unpack(Packed(pack(ODD[:1]).data, 2))


_TEXT = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)))


@seed(20261124)
@settings(max_examples=500, deadline=None, database=None)
@given(
    st.lists(
        st.tuples(_TEXT, _TEXT, st.binary().map(lambda b: b.replace(b"\0", b""))),
        max_size=20,
    )
)
def test_pack_and_unpack_round_trip(changes: list[tuple[str, str, bytes]]) -> None:
    packed = pack(changes)
    assert packed.changes == len(changes)
    assert unpack(packed) == changes
    assert stored_json(packed) == [c[2] for c in changes]
    # The quick ingest's packing, for fields it knows hold no NUL: the same Packed.
    unchecked = pack_nul_free(changes)
    assert unchecked == packed and type(unchecked) is Packed


# -- Ingest: append, then the live feed -------------------------------------------------


@pytest.fixture
async def ingest(client: Any) -> AsyncIterator[Ingest]:
    store = EventStore(client, uncertain=lambda topic: feeds.unsure(topic))
    feeds = FeedHub(store, Tasks("feeds", peers=True))
    yield Ingest(store, feeds)
    await feeds.close()
    await store.close()


async def test_the_process_feed_takes_its_own_appends_at_once(ingest: Ingest) -> None:
    feed = await ingest.feeds.acquire("t")
    await cancel_and_wait([feed._task])  # no XREAD: whatever the feed gets, it was handed
    first = await ingest.append("t", [_change("http://example.org/1")])
    assert [e.id for e in feed._events] == first.ids
    second = await ingest.append("t", pack(ODD[:2]))
    assert [(e.id, e.data) for e in feed._events[1:]] == [(e.id, e.data) for e in second.events]
    assert [e.data for e in second.events] == [c.event for c in ODD[:2]]


async def test_the_feed_takes_nothing_out_of_order_nor_twice(ingest: Ingest) -> None:
    ingest.feeds.follow_by_xread()  # what this checks is the XREAD path's hand-over
    feed = await ingest.feeds.acquire("t")
    await cancel_and_wait([feed._task])
    body = [_change("http://example.org/1")]
    first = await ingest.append("t", body, digest="d", idempotency_key="k")
    again = await ingest.append("t", body, digest="d", idempotency_key="k")
    assert again.replayed and again.ids == first.ids and again.events == []
    assert [e.id for e in feed._events] == first.ids  # the replay handed nothing over
    # Another process appends: this process's next append does not follow on from the
    # feed's last event, so the feed leaves it to XREAD (which brings both, in order).
    await ingest.store.append("t", [_change("http://example.org/2")])
    later = await ingest.append("t", [_change("http://example.org/3")])
    assert later.previous_id != first.ids[-1]
    assert [e.id for e in feed._events] == first.ids


async def test_the_id_before_an_append_comes_from_the_stream_when_the_topic_facts_lack_it(
    client: Any,
) -> None:
    """The script reads the last id from the topic's facts (one short field, not the whole
    last entry); where they lack it, from the stream itself, so a feed never takes events
    as following on from an id that is not the stream's last."""
    store = EventStore(client)
    try:
        first = await store.append("t", [_change("http://example.org/1")])
        second = await store.append("t", [_change("http://example.org/2")])
        assert second.previous_id == first.ids[-1]
        await client.hdel(keys.topic_meta("t"), keys.LAST_ID)
        third = await store.append("t", [_change("http://example.org/3")])
        assert third.previous_id == second.ids[-1]
        await client.delete(keys.topic_meta("t"), keys.events("t"))
        fourth = await store.append("t", [_change("http://example.org/4")])
        assert fourth.previous_id == ""
    finally:
        await store.close()


async def test_an_age_bound_older_than_every_id_trims_nothing_and_fails_nothing(
    client: Any,
) -> None:
    """A retention period longer than the epoch's age (a cutoff before 0-0, which an
    exclusive range cannot name): every publish is stored, nothing is trimmed."""
    store = EventStore(client, retention=Retention(seconds=10**11))
    try:
        for i in range(3):
            await store.append("t", [_change(f"http://example.org/{i}")])
        assert await store.length("t") == 3
        assert await store.trimmed_through("t") is None
    finally:
        await store.close()
