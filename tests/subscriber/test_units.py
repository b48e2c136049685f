"""Pure parts: path mapping, position and de-duplication, WebSub rules, integrity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from subscriber.events import ChangeEvent, event_order
from subscriber.exceptions import PositionError, UnsafePathError
from subscriber.integrity import matches
from subscriber.paths import uri_to_path, uri_to_relpath
from subscriber.position import EventCursor, EventCursorFile
from subscriber.websub import sign, subscription_form, verification_answer, verify_signature


@pytest.mark.parametrize(
    ("uri", "rel"),
    [
        ("http://Example.org/a/b.txt", "http/example.org/a/b.txt"),
        ("https://example.org:8443/a%20b/c", "https/example.org_8443/a%20b/c"),
        ("http://example.org/a b/c", "http/example.org/a%20b/c"),
        ("http://example.org/", "http/example.org/index"),
        ("http://example.org", "http/example.org/index"),
        ("http://example.org/dir/", "http/example.org/dir/index"),
        ("http://example.org/q?x=1&y=/z", "http/example.org/q%3Fx=1&y=%2Fz"),
        ("http://example.org/a%2Fb", "http/example.org/a%2Fb"),
        ("http://example.org/f#frag", "http/example.org/f"),
    ],
)
def test_uri_mapping(uri: str, rel: str) -> None:
    assert uri_to_relpath(uri) == rel


@pytest.mark.parametrize(
    "uri",
    [
        "http://example.org/../etc/passwd",
        "http://example.org/a/%2e%2E/b",
        "http://example.org/a/./b",
        "http://example.org/a//b",
        "file:///etc/passwd",
        "ftp://example.org/x",
        "http:///nohost",
        "http://exa_mple.org/x",
        "http://example.org/.rshub/state.json",
        "http://example.org/" + "x" * 300,
    ],
)
def test_unsafe_uris_are_refused(uri: str, tmp_path: Path) -> None:
    with pytest.raises(UnsafePathError):
        uri_to_path(tmp_path, uri)


def test_mapping_stays_inside_root(tmp_path: Path) -> None:
    path = uri_to_path(tmp_path, "http://example.org/a/b")
    assert tmp_path.resolve() in path.resolve().parents


def _ev(loc: str, lastmod: str = "2026-01-01T00:00:00Z", id: str | None = None) -> ChangeEvent:
    return ChangeEvent(loc=loc, lastmod=lastmod, change="updated", id=id)


def test_position_dedupes_by_id_then_by_key() -> None:
    pos = EventCursor()
    assert pos.accept(_ev("a", id="5-0"))
    assert not pos.accept(_ev("a", id="5-0"))
    assert not pos.accept(_ev("b", id="4-9"))  # older id: already delivered
    assert pos.accept(_ev("c", id="10-0"))
    assert not pos.accept(_ev("c"))  # same change from a Change List (no id)
    assert pos.accept(_ev("c", lastmod="2026-01-01T00:00:01Z"))
    assert pos.event_id == "10-0"
    assert event_order("10-3") == (10, 3) and event_order("x") is None


def test_two_changes_with_one_lastmod_are_two_when_their_ids_say_so() -> None:
    """A publisher's lastmod has whole seconds: two updates of one resource within one second
    (or from a clock that went back) share it. The hub's ids tell them apart; the second
    was dropped as a duplicate, and a mirror kept the first version."""
    pos = EventCursor()
    assert pos.accept(_ev("a", id="5-0"))
    assert pos.accept(_ev("a", id="7-0"))  # same (loc, lastmod, change), a newer id
    assert not pos.accept(_ev("a", id="7-0"))
    assert not pos.accept(_ev("a"))  # without an id the key still judges


def test_position_watermark_never_passes_now() -> None:
    pos = EventCursor()
    pos.accept(_ev("a", lastmod="2999-01-01T00:00:00Z"))
    assert pos.watermark is not None and pos.watermark.year < 2999


def test_position_file_round_trip(tmp_path: Path) -> None:
    store = EventCursorFile(tmp_path / "s" / "state.json")
    assert store.load().event_id is None
    pos = EventCursor()
    pos.accept(_ev("a", id="1-1"))
    pos.extra["baseline"] = True
    store.save(pos)
    again = store.load()
    assert again.event_id == "1-1" and ("a", "2026-01-01T00:00:00Z", "updated") in again.recent
    assert again.extra == {"baseline": True} and again.watermark == pos.watermark
    (tmp_path / "s" / "state.json").write_text("{not json")
    with pytest.raises(PositionError):
        store.load()


def test_websub_signature_and_verification() -> None:
    body = b"<urlset/>"
    header = sign("s3cret", body)
    assert header.startswith("sha256=")
    assert verify_signature("s3cret", header, body)
    assert verify_signature("s3cret", sign("s3cret", body, "sha512"), body)
    assert not verify_signature("s3cret", header, body + b" ")
    assert not verify_signature("other", header, body)
    assert not verify_signature("s3cret", None, body)
    assert not verify_signature("s3cret", "md5=abc", body)
    query = {"hub.mode": "subscribe", "hub.topic": "T", "hub.challenge": "xyz"}
    assert verification_answer(query, topic="T", wanted={"subscribe"}) == "xyz"
    assert verification_answer(query, topic="T", wanted=set()) is None
    assert verification_answer(query, topic="U", wanted={"subscribe"}) is None
    form = subscription_form(
        "subscribe", topic="T", callback="C", secret="s", lease_seconds=60, since="1-0"
    )
    assert form["hub.since"] == "1-0" and form["hub.lease_seconds"] == "60"
    assert "hub.secret" not in subscription_form("unsubscribe", topic="T", callback="C", secret="s")


def test_integrity() -> None:
    data = b"hello"
    md5 = "md5:5d41402abc4b2a76b9719d911017c592"
    assert matches(data, length=5, hash=md5) is None
    assert matches(data, length=4, hash=None) is not None
    assert matches(b"hellO", length=None, hash=md5) is not None
    assert matches(data, length=None, hash="sha-256:" + "0" * 64) is not None
    assert matches(data, length=None, hash="crc32:zzz") is None  # unknown: not checked


def test_create_then_delete_in_one_lastmod_tick_are_both_delivered() -> None:
    # Regression: a ResourceSync 1.0 Source (resync-simulator) writes deletions without a
    # time, so a deletion can share its creation's lastmod; keyed by (loc, lastmod) alone
    # the deletion was dropped as a duplicate and the mirror kept a deleted file.
    pos = EventCursor()
    created = ChangeEvent(loc="a", lastmod="2026-01-01T00:00:00Z", change="created")
    deleted = ChangeEvent(loc="a", lastmod="2026-01-01T00:00:00Z", change="deleted")
    assert pos.accept(created) and pos.accept(deleted)
    assert not pos.accept(deleted)


def test_baseline_state_makes_a_matching_update_a_duplicate() -> None:
    pos = EventCursor()
    pos.remember("a", "2026-01-01T00:00:00Z")
    assert not pos.accept(_ev("a"))
    assert pos.accept(ChangeEvent(loc="a", lastmod="2026-01-01T00:00:00Z", change="deleted"))


def _replayed(
    loc: str, id: str, change: str = "deleted", lastmod: str = "2026-01-01"
) -> ChangeEvent:
    return ChangeEvent(loc=loc, lastmod=lastmod + "T00:00:00Z", change=change, id=id, replayed=True)


def test_a_replayed_dead_letter_is_judged_by_its_resource_not_the_topic() -> None:
    pos = EventCursor()
    assert pos.accept(_ev("b", "2026-01-02T00:00:00Z", id="20-0"))
    assert pos.accept(_ev("a", "2026-01-03T00:00:00Z", id="30-0"))  # "a" changed later
    assert pos.accept(_ev("c", "2026-01-04T00:00:00Z", id="40-0"))
    # Older than the position, newer than what "b" got: taken; older than "a"'s: refused;
    # a resource never handed over: taken (nothing dropped that could be new).
    assert not pos.accept(_replayed("a", "25-0"))
    assert pos.accept(_replayed("b", "25-1"))
    assert pos.accept(_replayed("d", "1-0", change="created"))
    # The same replay again (a forged or repeated X-RSHub-Replay): refused, by resource.
    assert not pos.accept(_replayed("b", "25-1"))
    assert not pos.accept(_ev("b", id="25-1"))  # not replayed: older than the position
    # The topic's position never goes back; a later live change of "b" still comes.
    assert pos.event_id == "40-0"
    assert pos.accept(_ev("b", "2026-01-05T00:00:00Z", id="41-0"))
    assert not pos.accept(_replayed("b", "25-1", lastmod="2026-01-06"))
    # Kept across a restart.
    again = EventCursor.from_json(pos.to_json())
    assert again.applied == pos.applied and again.applied["b"] == "41-0"
    assert not again.accept(_replayed("a", "29-9", lastmod="2026-01-07"))
    assert _replayed("a", "1-0").to_json()["replayed"] is True
    assert "replayed" not in _ev("a", id="1-0").to_json()


def test_the_per_resource_ids_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import subscriber.position

    monkeypatch.setattr(subscriber.position, "MAX_RECENT", 3)
    pos = EventCursor()
    for i in range(5):
        pos.accept(_ev(f"r{i}", id=f"{i + 1}-0"))
    assert list(pos.applied) == ["r2", "r3", "r4"]
    # A position file of the previous shape (no "applied") still loads.
    old = {k: v for k, v in pos.to_json().items() if k != "applied"}
    assert EventCursor.from_json(old).applied == {}


#: A baseline's instant on the hub's clock, and hub event ids before and after it.
_AT = "2026-12-02T10:00:00.500Z"
_BEFORE, _AFTER = "1796205600499-7", "1796205600500-0"


def _baselined() -> EventCursor:
    from resourcesync import parse_datetime

    pos = EventCursor()
    pos.remember("a", "2026-01-01T00:00:00Z")
    pos.baselined(parse_datetime(_AT))
    return pos


def test_an_event_the_baseline_covers_is_held_and_the_ids_judge_the_rest() -> None:
    """The catch-up after a baseline re-reads changes the baseline holds: one received
    before its ``at`` and listed by it is not fetched again, however many came before it
    (each id newer than the last had been judged new, and fetched a second time)."""
    assert event_order(_BEFORE) == (1796205600499, 7)  # the whole millisecond before _AT
    pos = _baselined()
    assert pos.accept(_ev("b", id="1796205600000-0"))  # not listed by the baseline: new
    assert pos.accept(_ev("a", lastmod="2025-12-31T23:59:59Z", id="1796205600100-0"))
    assert not pos.accept(_ev("a", id=_BEFORE))
    # The same key after the instant (received within the baseline's millisecond, or
    # later): the ids decide, so it is applied.
    assert pos.accept(_ev("a", id=_AFTER))


def test_two_updates_in_one_lastmod_second_after_the_baseline_are_both_applied() -> None:
    pos = _baselined()
    assert pos.accept(_ev("a", id="1796205601000-0"))
    assert pos.accept(_ev("a", id="1796205601000-1"))
    assert not pos.accept(_ev("a", id="1796205601000-1"))


def test_without_a_baseline_instant_or_a_time_in_the_id_the_ids_decide() -> None:
    pos = _baselined()
    pos.baselined(None)  # a baseline without ``at``: nothing is known covered
    pos.event_id = "1796205600000-0"
    assert pos.accept(_ev("a", id=_BEFORE))
    # An id without a time: judged as without the instant (here by its key).
    for event_id in ("opaque", "x-1", "1-x"):
        pos, plain = _baselined(), _baselined()
        plain.baselined(None)
        pos.event_id = plain.event_id = "1796205600000-0"
        assert pos.seen(_ev("a", id=event_id)) == plain.seen(_ev("a", id=event_id))


def test_the_baseline_instant_is_kept_and_a_file_without_it_loads(tmp_path: Path) -> None:
    store = EventCursorFile(tmp_path / "state.json")
    store.save(_baselined())
    again = store.load()
    assert again.baseline_at == _baselined().baseline_at is not None
    assert not again.accept(_ev("a", id=_BEFORE))
    # A file written before the instant was kept: loads, and the ids decide as before.
    old = {k: v for k, v in _baselined().to_json().items() if k != "baseline_at"}
    assert EventCursor.from_json(old).baseline_at is None
    older = EventCursor.from_json({**old, "event_id": "1796205600000-0"})
    assert older.accept(_ev("a", id=_BEFORE)), "no instant: a newer id is new"
    for bad in ("yesterday", 17):
        (tmp_path / "state.json").write_text(json.dumps({**old, "baseline_at": bad}))
        with pytest.raises(PositionError):
            store.load()
