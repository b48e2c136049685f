"""The pull-to-push bridge: Section 12.1 reading, conditional GET, resume, exactly once."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from publisher import Publisher, RetryPolicy
from publisher.bridge import Bridge
from publisher.exceptions import SourceError
from publisher.position import ChangeListCursor, in_order
from publisher.state import StateFile
from resourcesync import (
    CapabilityList,
    ChangeList,
    ChangeListIndex,
    Entry,
    Link,
    Metadata,
    SourceDescription,
    format_datetime,
    serialize,
)
from tests.conftest import Hub

from .helpers import T0, StaticSource, serve, stored_events

FAST = RetryPolicy(base=0.01, max_delay=0.05)


def t(i: int) -> Any:
    return T0 + timedelta(seconds=i)


def v10(loc: str, change: str, i: int) -> Entry:
    """A ResourceSync 1.0 change: the change time is lastmod."""
    return Entry(loc=f"http://src.example/{loc}", lastmod=t(i), md=Metadata(change=change))


def v11(loc: str, change: str, i: int, *, lastmod: bool = True) -> Entry:
    """A ResourceSync 1.1 change: the change time is rs:md/@datetime."""
    return Entry(
        loc=f"http://src.example/{loc}",
        lastmod=t(i - 1) if lastmod else None,
        md=Metadata(change=change, datetime=t(i)),
    )


def changelist(
    entries: list[Entry], start: int, until: int | None = None, index: str | None = None
) -> bytes:
    links = [Link(rel="up", href="http://src.example/cap.xml")]
    if index:
        links.append(Link(rel="index", href=index))
    return serialize(
        ChangeList(
            md=Metadata(from_=t(start), until=None if until is None else t(until)),
            entries=tuple(entries),
            links=tuple(links),
        )
    )


def index(base: str, lists: list[tuple[str, int, int | None]]) -> bytes:
    return serialize(
        ChangeListIndex(
            md=Metadata(from_=t(0)),
            entries=tuple(
                Entry(loc=base + path, md=Metadata(from_=t(a), until=None if b is None else t(b)))
                for path, a, b in lists
            ),
        )
    )


def discovery(source: StaticSource, base: str) -> None:
    source.docs["/.well-known/resourcesync"] = serialize(
        SourceDescription(
            entries=(Entry(loc=base + "/cap.xml", md=Metadata(capability="capabilitylist")),)
        )
    )
    source.docs["/cap.xml"] = serialize(
        CapabilityList(
            entries=(
                Entry(loc=base + "/resourcelist.xml", md=Metadata(capability="resourcelist")),
                Entry(loc=base + "/changelist-index.xml", md=Metadata(capability="changelist")),
            )
        )
    )


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(e["loc"].rsplit("/", 1)[1], e["change"], e["lastmod"]) for e in events]


def test_position_counts_changes_at_the_same_time() -> None:
    same = [v10("a", "updated", 1), v10("a", "updated", 1), v10("b", "created", 1)]
    position = ChangeListCursor().after(same[:1])
    assert position.new_entries(same) == same[1:]
    position = position.after(same[1:])
    assert position.new_entries([*same, v10("c", "deleted", 2)]) == [v10("c", "deleted", 2)]
    assert ChangeListCursor.from_json(position.to_json()) == position


async def test_reads_the_source_as_section_12_prescribes(hub: Hub, redis_url: str) -> None:
    source = StaticSource()
    async with serve(source.app) as base:
        discovery(source, base)
        closed = [v10("r1", "created", 1), v10("r2", "created", 2), v10("r1", "updated", 3)]
        open_ = [v11("r3", "created", 6), v11("r2", "deleted", 7, lastmod=False)]
        source.docs["/cl1.xml"] = changelist(closed, 0, 5)
        source.docs["/cl2.xml"] = changelist(open_, 5)
        source.docs["/changelist-index.xml"] = index(
            base, [("/cl1.xml", 0, 5), ("/cl2.xml", 5, None)]
        )
        async with Publisher(hub.url, "src", retry=FAST) as pub:
            bridge = Bridge(base + "/.well-known/resourcesync", pub)
            first = await bridge.poll()
            assert first.published == 5
            assert first.feeds == [base + "/changelist-index.xml"]

            source.requests.clear()
            second = await bridge.poll()  # nothing new: conditional GETs, closed list skipped
            assert second.published == 0
            assert "/cl1.xml" not in source.requests
            assert set(source.not_modified) >= {"/.well-known/resourcesync", "/cap.xml", "/cl2.xml"}

            # the open list grows, with a change at the same time as the last one published
            open_ += [v11("r4", "updated", 7), v11("r5", "created", 8)]
            source.docs["/cl2.xml"] = changelist(open_, 5)
            assert (await bridge.poll()).published == 2

            # it closes, and a new open list follows it in the index
            source.docs["/cl2.xml"] = changelist(open_, 5, 9)
            source.docs["/cl3.xml"] = changelist([v10("r6", "created", 10)], 9)
            source.docs["/changelist-index.xml"] = index(
                base, [("/cl1.xml", 0, 5), ("/cl2.xml", 5, 9), ("/cl3.xml", 9, None)]
            )
            assert (await bridge.poll()).published == 1
    assert summary(await stored_events(redis_url, "src")) == [
        ("r1", "created", format_datetime(t(1))),
        ("r2", "created", format_datetime(t(2))),
        ("r1", "updated", format_datetime(t(3))),
        ("r3", "created", format_datetime(t(6))),
        ("r2", "deleted", format_datetime(t(7))),
        ("r4", "updated", format_datetime(t(7))),
        ("r5", "created", format_datetime(t(8))),
        ("r6", "created", format_datetime(t(10))),
    ]


async def test_closed_change_list_leads_to_its_index(hub: Hub, redis_url: str) -> None:
    source = StaticSource()
    async with serve(source.app) as base:
        idx = base + "/index.xml"
        source.docs["/cl1.xml"] = changelist([v10("a", "created", 1)], 0, 2, index=idx)
        source.docs["/cl2.xml"] = changelist([v10("b", "created", 3)], 2, index=idx)
        source.docs["/index.xml"] = index(base, [("/cl1.xml", 0, 2), ("/cl2.xml", 2, None)])
        async with Publisher(hub.url, "src", retry=FAST) as pub:
            assert (await Bridge(base + "/cl1.xml", pub).poll()).published == 2
    assert [e["loc"] for e in await stored_events(redis_url, "src")] == [
        "http://src.example/a",
        "http://src.example/b",
    ]


async def test_restart_resumes_and_a_crash_after_the_ack_stores_nothing_twice(
    hub: Hub, redis_url: str, tmp_path: Path
) -> None:
    source = StaticSource()
    state = StateFile(tmp_path / "bridge.json")
    async with serve(source.app) as base:
        changes = [v10(f"r{i}", "created", i) for i in range(1, 6)]
        source.docs["/cl.xml"] = changelist(changes, 0)
        async with Publisher(hub.url, "src", retry=FAST) as pub:
            real_send = pub.send

            async def send_then_crash(*args: Any, **kwargs: Any) -> Any:
                await real_send(*args, **kwargs)
                raise RuntimeError("crash after the hub stored the chunk")

            pub.send = send_then_crash  # type: ignore[method-assign]
            with pytest.raises(RuntimeError, match="crash"):
                await Bridge(base + "/cl.xml", pub, state=state, chunk_size=3).poll()
        assert state.load()["pending"]["count"] == 3
        assert len(await stored_events(redis_url, "src")) == 3

        source.docs["/cl.xml"] = changelist([*changes, v10("r6", "created", 6)], 0)
        async with Publisher(hub.url, "src", retry=FAST) as pub:
            bridge = Bridge(base + "/cl.xml", pub, state=state, chunk_size=3)
            assert (await bridge.poll()).published == 6  # 3 replayed by the hub, 3 new
            assert state.load()["pending"] is None
            assert (await Bridge(base + "/cl.xml", pub, state=state).poll()).published == 0
    stored = await stored_events(redis_url, "src")
    assert [e["loc"].rsplit("/", 1)[1] for e in stored] == [f"r{i}" for i in range(1, 7)]


async def test_since_now_skips_what_is_listed(hub: Hub, redis_url: str) -> None:
    source = StaticSource()
    async with serve(source.app) as base:
        source.docs["/cl.xml"] = changelist([v10("old", "created", 1)], 0)
        async with Publisher(hub.url, "src", retry=FAST) as pub:
            bridge = Bridge(base + "/cl.xml", pub, since="now")
            assert (await bridge.poll()).published == 0
            source.docs["/cl.xml"] = changelist(
                [v10("old", "created", 1), v10("new", "created", 2)], 0
            )
            assert (await bridge.poll()).published == 1
    assert [e["loc"] for e in await stored_events(redis_url, "src")] == ["http://src.example/new"]


@pytest.mark.parametrize(
    "bad", ["relative/path", "ftp://src.example/x", "http://src.example/a b", "urn:x:y"]
)
async def test_an_entry_whose_loc_the_hub_refuses_is_skipped_not_a_stop(
    hub: Hub, redis_url: str, caplog: Any, bad: str
) -> None:
    """One such entry in a Source's Change List failed the hub's whole notification, and
    the bridge stopped there at every restart: it is skipped and said, the rest published."""
    source = StaticSource()
    async with serve(source.app) as base:
        odd = Entry(loc=bad, lastmod=t(2), md=Metadata(change="created"))
        source.docs["/cl.xml"] = changelist(
            [v10("a", "created", 1), odd, v10("b", "updated", 3)], 0
        )
        async with Publisher(hub.url, "src", retry=FAST) as pub:
            assert (await Bridge(base + "/cl.xml", pub).poll()).published == 2
    assert [e["loc"] for e in await stored_events(redis_url, "src")] == [
        "http://src.example/a",
        "http://src.example/b",
    ]
    assert "skipping an entry the hub would refuse" in caplog.text and bad in caplog.text


async def test_broken_source_is_reported_and_polled_again(hub: Hub, caplog: Any) -> None:
    source = StaticSource()
    async with serve(source.app) as base:
        source.fail.add("/cl.xml")
        async with Publisher(hub.url, "src", retry=FAST) as pub:
            bridge = Bridge(base + "/cl.xml", pub)
            with pytest.raises(SourceError, match="HTTP 500"):
                await bridge.poll()
            source.docs["/not-rs.xml"] = b"<html/>"
            with pytest.raises(SourceError, match="not a ResourceSync document"):
                await Bridge(base + "/not-rs.xml", pub).poll()
            await bridge.run(interval=0.0, polls=2)
    assert source.requests.count("/cl.xml") == 3
    assert "poll of" in caplog.text and "HTTP 500" in caplog.text


def test_untimed_entries_get_the_time_the_order_bounds() -> None:
    """resync-simulator in 1.0 mode writes deletions with neither lastmod nor datetime."""
    untimed = Entry(loc="http://src.example/gone", md=Metadata(change="deleted"))
    head, mid = untimed, untimed.model_copy(update={"loc": "http://src.example/gone2"})
    entries, inferred = in_order([head, v10("a", "created", 3), mid, v10("b", "created", 5)])
    assert inferred == 2
    assert [(e.loc.rsplit("/", 1)[1], e.change_time) for e in entries] == [
        ("gone", t(3)),
        ("a", t(3)),
        ("gone2", t(3)),
        ("b", t(5)),
    ]
    assert in_order([head], t(1))[0][0].lastmod == t(1)  # the list's `from` bounds it
    assert in_order([head]) == ([], 1)  # no bound at all: left for a later poll
