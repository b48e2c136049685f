"""The edit-feed mapping, event type by event type, and the filters."""

from __future__ import annotations

import random
from typing import Any

import pytest

from publisher.wikipedia import EditFilter, changes_from_event, meta_of, page_url, revision_url
from resourcesync import Change, parse_datetime

SERVER = "https://en.wikipedia.org"
WHEN = "2026-01-05T12:00:00.403Z"


def event(type_: str, title: str = "Foo bar", **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "$schema": "/mediawiki/recentchange/1.0.0",
        "meta": {"uri": f"{SERVER}/wiki/Foo_bar", "dt": WHEN, "domain": "en.wikipedia.org"},
        "type": type_,
        "namespace": 0,
        "title": title,
        "timestamp": 1767614400,
        "bot": False,
        "server_url": SERVER,
        "server_name": "en.wikipedia.org",
        "server_script_path": "/w",
        "wiki": "enwiki",
    }
    base.update(fields)
    return base


def log_event(log_type: str, action: str, params: Any = (), **fields: Any) -> dict[str, Any]:
    return event(
        "log",
        log_type=log_type,
        log_action=action,
        log_params=list(params) if isinstance(params, tuple) else params,
        **fields,
    )


def summary(ev: dict[str, Any], **kw: Any) -> list[tuple[str, str]]:
    return [(e.loc, str(e.change)) for e in changes_from_event(ev, **kw)]


PAGE = f"{SERVER}/wiki/Foo_bar"


def test_edit_is_updated_with_revision_links() -> None:
    [entry] = changes_from_event(
        event("edit", revision={"old": 10, "new": 12}, length={"old": 100, "new": 120})
    )
    assert entry.loc == PAGE
    assert entry.change is Change.UPDATED
    assert entry.lastmod == parse_datetime(WHEN)
    assert entry.md is not None and entry.md.type == "text/html" and entry.md.length is None
    links = {ln.rel: ln for ln in entry.links}
    assert links["latest-version"].href == f"{SERVER}/w/index.php?title=Foo_bar&oldid=12"
    assert links["predecessor-version"].href == f"{SERVER}/w/index.php?title=Foo_bar&oldid=10"
    raw = links["alternate"]
    assert raw.href == f"{SERVER}/w/index.php?title=Foo_bar&action=raw&oldid=12"
    assert (raw.type, raw.length) == ("text/x-wiki", 120)


def test_new_page_is_created_without_predecessor() -> None:
    [entry] = changes_from_event(event("new", revision={"new": 5}, length={"new": 42}))
    assert entry.change is Change.CREATED
    assert [ln.rel for ln in entry.links] == ["latest-version", "alternate"]


def test_delete_is_deleted_without_type_or_links() -> None:
    for action in ("delete", "delete_redir"):
        [entry] = changes_from_event(log_event("delete", action))
        assert (entry.loc, entry.change) == (PAGE, Change.DELETED)
        assert entry.md is not None and entry.md.type is None and entry.links == ()


def test_restore_is_created() -> None:
    assert summary(log_event("delete", "restore", {"count": {"revisions": 3}})) == [
        (PAGE, "created")
    ]


def test_move_without_redirect_deletes_old_and_creates_new() -> None:
    ev = log_event("move", "move", {"target": "Talk:Bär Straße", "noredir": "1"})
    assert summary(ev) == [
        (PAGE, "deleted"),
        (f"{SERVER}/wiki/Talk:B%C3%A4r_Stra%C3%9Fe", "created"),
    ]


def test_move_leaving_a_redirect_updates_old_and_creates_new() -> None:
    for action in ("move", "move_redir"):
        ev = log_event("move", action, {"target": "New (title)", "noredir": "0"})
        assert summary(ev) == [(PAGE, "updated"), (f"{SERVER}/wiki/New_(title)", "created")]


def test_move_without_target_is_an_error() -> None:
    with pytest.raises(ValueError, match="target"):
        changes_from_event(log_event("move", "move", []))


def test_uploads() -> None:
    assert summary(log_event("upload", "upload")) == [(PAGE, "created")]
    assert summary(log_event("upload", "overwrite")) == [(PAGE, "updated")]


def test_categorize_is_skipped_unless_asked_for() -> None:
    ev = event("categorize", title="Category:Rivers", namespace=14)
    assert summary(ev) == []
    assert summary(ev, categorize=True) == [(f"{SERVER}/wiki/Category:Rivers", "updated")]


@pytest.mark.parametrize(
    "log_type,action",
    [("block", "block"), ("patrol", "patrol"), ("protect", "protect"), ("delete", "revision")],
)
def test_logs_that_change_no_page_are_skipped(log_type: str, action: str) -> None:
    assert summary(log_event(log_type, action)) == []


def test_unknown_type_is_skipped() -> None:
    assert summary(event("external")) == []


def test_time_falls_back_to_timestamp() -> None:
    ev = event("edit")
    ev["meta"] = {}
    [entry] = changes_from_event(ev)
    assert entry.lastmod == parse_datetime("2026-01-05T12:00:00Z")


def test_event_without_title_is_an_error() -> None:
    with pytest.raises(ValueError, match="title"):
        changes_from_event(event("edit", title=""))


def test_urls_follow_mediawiki_encoding() -> None:
    assert page_url(SERVER, "AC/DC & Co. (band)?") == f"{SERVER}/wiki/AC/DC_%26_Co._(band)%3F"
    assert revision_url("https://www.wikidata.org", "/w", "Q42", 7) == (
        "https://www.wikidata.org/w/index.php?title=Q42&oldid=7"
    )


def test_filters() -> None:
    ev = event("edit", bot=True, namespace=1)
    assert EditFilter().accepts(ev)
    assert not EditFilter.of(bots=False).accepts(ev)
    assert EditFilter.of(wikis=["enwiki"]).accepts(ev)
    assert EditFilter.of(wikis=["en.wikipedia.org"]).accepts(ev)
    assert not EditFilter.of(wikis=["dewiki"]).accepts(ev)
    assert EditFilter.of(namespaces=[0, 1]).accepts(ev)
    assert not EditFilter.of(namespaces=[0]).accepts(ev)


#: Values a hostile or broken feed may put in any field.
HOSTILE = [
    None, 0, -1, 10**30, 1.5, float("nan"), True, "", " ", "x", "x y", "\x00", "\u2028",
    "ftp://x.invalid", "javascript:alert(1)", "http://x.invalid/a b", "https://ok.invalid",
    "/w x", "?a#b", [], [1], {}, {"dt": "soon"}, {"new": "7"}, {"target": 5},
    "2026-13-40T99:00:00Z", "ü" * 3,
]  # fmt: skip
FIELDS = [
    "type", "title", "server_url", "server_script_path", "meta", "timestamp", "revision",
    "length", "log_type", "log_action", "log_params", "namespace", "bot", "wiki",
]  # fmt: skip


@pytest.mark.parametrize("seed", range(3))
def test_fuzz_an_event_gives_changes_the_hub_takes_or_a_value_error(seed: int) -> None:
    """Seeded fuzz: whatever a recentchange event holds, changes_from_event either raises
    ValueError (the event is skipped, said once) or returns changes the hub accepts: one
    loc or href the hub refuses would fail the whole notification, other events' changes
    with it."""
    from hub.core.events import LOC  # the hub's rule for a loc, read in the test only

    rng = random.Random(1207 + seed)
    kinds = [
        event("edit", revision={"new": 2, "old": 1}, length={"new": 5}),
        event("new", revision={"new": 2}),
        log_event("move", "move", {"target": "Bar", "noredir": "1"}),
        log_event("delete", "delete"),
        event("categorize"),
    ]
    picky = EditFilter.of(wikis=["enwiki"], namespaces=[0], bots=False)
    made = 0
    for _ in range(400):
        ev = dict(rng.choice(kinds))
        for _ in range(rng.randint(1, 3)):
            ev[rng.choice(FIELDS)] = rng.choice(HOSTILE)
        # The feed loop's filter and canary check take any event too (they raised before).
        assert picky.accepts(ev) in (True, False)
        assert meta_of(ev).get("domain") in (None, "en.wikipedia.org")
        try:
            entries = changes_from_event(ev, categorize=True)
        except ValueError:
            continue
        for entry in entries:
            made += 1
            assert LOC.fullmatch(entry.loc), (ev, entry.loc)
            for link in entry.links:
                assert LOC.fullmatch(link.href), (ev, link.href)
    assert made > 100
