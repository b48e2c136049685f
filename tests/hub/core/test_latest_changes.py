"""hub.core.latest_changes: the latest-per-URI fold behind changes.xml, and its marker time.

Pure: rows are stored events as the stream holds them, no Redis. The seeded test checks the
view against its definition (the ``limit`` newest latest changes over ``(trimmed_through,
last_id]``) and that it does not depend on the history that built it: a view folded event
by event, trimmed as it went, equals one built from the retained events alone.
"""

from __future__ import annotations

import random

import orjson
import pytest

from hub.core.events import parse_id
from hub.core.exceptions import DamagedData
from hub.core.latest_changes import (
    MAX_ENTRIES,
    VIEW_ENTRIES,
    LatestChanges,
    fold_rows,
    marker_ms,
)
from hub.core.rendering import listed_change


def stored(loc: str, change: str = "updated") -> bytes:
    return orjson.dumps({"loc": loc, "lastmod": "2026-01-01T00:00:00Z", "change": change})


def rows(*changes: tuple[str, str, str]) -> list[tuple[str, bytes]]:
    """``(event id, loc, change)`` each."""
    return [(event_id, stored(loc, change)) for event_id, loc, change in changes]


def ids(view: LatestChanges) -> list[str]:
    return [event_id for event_id, _ in view.listed()]


def test_a_batch_folds_to_the_latest_change_of_each_uri_in_their_order() -> None:
    batch = rows(
        ("10-0", "http://x/a", "created"),
        ("10-1", "http://x/b", "created"),
        ("11-0", "http://x/a", "updated"),
        ("12-0", "http://x/c", "created"),
        ("12-1", "http://x/c", "deleted"),
    )
    folded = fold_rows(batch)
    assert [(loc, event_id) for loc, event_id, _ in folded] == [
        ("http://x/b", "10-1"),
        ("http://x/a", "11-0"),
        ("http://x/c", "12-1"),
    ]
    data = orjson.loads(batch[4][1])
    assert folded[2][2] == listed_change("12-1", data).encode()


def test_a_created_then_deleted_uri_is_listed_once_as_deleted() -> None:
    """What resync's prune_dupes would drop as a pair never reaches it."""
    view = LatestChanges()
    view.fold(fold_rows(rows(("1-0", "http://x/a", "created"))))
    view.fold(fold_rows(rows(("2-0", "http://x/a", "deleted"))))
    [(event_id, xml)] = view.listed()
    assert event_id == "2-0" and b'change="deleted"' in xml
    assert view.lost_through is None


def test_a_damaged_event_is_said() -> None:
    with pytest.raises(DamagedData):
        fold_rows([("1-0", b"not json")])


def test_the_limit_keeps_the_newest_and_names_the_newest_left_out() -> None:
    view = LatestChanges(limit=3)
    for n in range(5):
        view.fold(fold_rows(rows((f"{n + 1}-0", f"http://x/{n}", "created"))))
    assert ids(view) == ["3-0", "4-0", "5-0"]
    assert view.lost_through == "2-0"
    # a change to a URI left out comes back at the end, and pushes out the oldest
    view.fold(fold_rows(rows(("6-0", "http://x/0", "updated"))))
    assert ids(view) == ["4-0", "5-0", "6-0"]
    assert view.lost_through == "3-0"
    # a change to a listed URI moves it to the end; nothing else is left out
    view.fold(fold_rows(rows(("7-0", "http://x/3", "updated"))))
    assert ids(view) == ["5-0", "6-0", "7-0"] and view.lost_through == "3-0"


def test_a_trim_drops_what_it_removed_and_is_the_loss_when_newer() -> None:
    view = LatestChanges(limit=3)
    for n in range(5):
        view.fold(fold_rows(rows((f"{n + 1}-0", f"http://x/{n}", "created"))))
    view.trim("1-5")  # older than what the limit left out already
    assert view.lost_through == "2-0" and len(view) == 3
    view.trim("4-0")
    assert ids(view) == ["5-0"] and view.lost_through == "4-0"
    view.trim("3-0")  # never backwards
    assert view.trimmed_through == "4-0"
    view.trim(None)
    assert view.trimmed_through == "4-0"


def test_events_must_come_in_stream_order() -> None:
    view = LatestChanges()
    view.fold(fold_rows(rows(("5-0", "http://x/a", "created"))))
    with pytest.raises(ValueError, match="not after"):
        view.fold(fold_rows(rows(("5-0", "http://x/b", "created"))))
    view.advance("9-0")  # the stream ends later: what lay between was trimmed unread
    assert view.last_id == "9-0"
    view.advance("7-0")
    assert view.last_id == "9-0"


def test_limits_match_the_sitemaps_limit_with_the_marker() -> None:
    assert VIEW_ENTRIES + 1 == MAX_ENTRIES == 50_000
    with pytest.raises(ValueError):
        LatestChanges(limit=0)


@pytest.mark.parametrize(
    ("lost", "expected"),
    [("1795341600120-0", 1795341600119), ("1795341600120-7", 1795341600119), ("0-0", 0)],
)
def test_the_marker_is_one_millisecond_before_the_newest_change_not_listed(
    lost: str, expected: int
) -> None:
    assert marker_ms(lost) == expected


def test_the_marker_separates_positions_as_resync_compares_them() -> None:
    """resync keeps entries at or after its position: a client that read the lost change
    (position = its datetime) skips the marker; one before it meets the marker."""
    lost = "1795341600120-0"
    read_it = parse_id(lost)[0]
    assert not marker_ms(lost) >= read_it
    assert marker_ms(lost) >= read_it - 1


def _reference(
    events: list[tuple[str, str, str]], trimmed: str | None, limit: int
) -> tuple[list[str], str | None]:
    """The definition: latest change per URI over the retained events, newest ``limit``."""
    floor = parse_id(trimmed) if trimmed else (-1, -1)
    latest: dict[str, str] = {}
    for event_id, loc, _ in events:
        if parse_id(event_id) > floor:
            latest.pop(loc, None)
            latest[loc] = event_id
    listed = list(latest.values())
    kept, left_out = listed[-limit:], listed[:-limit]
    lost = [*left_out[-1:], *([trimmed] if trimmed else [])]
    newest = max(lost, key=parse_id, default=None)
    return kept, newest


@pytest.mark.parametrize("seed", range(20))
def test_a_view_is_its_definition_whatever_history_built_it(seed: int) -> None:
    rnd = random.Random(seed)
    limit = rnd.choice([1, 3, 5, 50])
    locs = [f"http://x/{n}" for n in range(rnd.choice([2, 6, 20]))]
    events: list[tuple[str, str, str]] = []
    ms, seq = 1000, 0
    live = LatestChanges(limit)
    trimmed: str | None = None
    for _ in range(rnd.randint(1, 120)):
        batch = []
        for _ in range(rnd.randint(1, 6)):
            if rnd.random() < 0.5:
                ms, seq = ms + rnd.randint(1, 3), 0
            else:
                seq += 1
            event = (f"{ms}-{seq}", rnd.choice(locs), rnd.choice(["created", "updated", "deleted"]))
            events.append(event)
            batch.append(event)
        live.fold(fold_rows(rows(*batch)))
        if rnd.random() < 0.3:  # retention removes a prefix of the stream
            trimmed = max(
                [e[0] for e in events[: rnd.randint(0, len(events))]] + [trimmed or "0-0"],
                key=parse_id,
            )
            trimmed = None if trimmed == "0-0" else trimmed
            live.trim(trimmed)
        kept, lost = _reference(events, trimmed, limit)
        assert ids(live) == kept
        assert live.lost_through == lost

    fresh = LatestChanges(limit)
    floor = parse_id(trimmed) if trimmed else (-1, -1)
    retained = [e for e in events if parse_id(e[0]) > floor]
    for start in range(0, len(retained), 7):
        fresh.fold(fold_rows(rows(*retained[start : start + 7])))
    fresh.trim(trimmed)
    fresh.advance(events[-1][0])
    assert fresh.listed() == live.listed()
    assert fresh.lost_through == live.lost_through
    assert fresh.last_id == live.last_id
