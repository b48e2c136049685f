"""hub.store.keys and hub.store.scripts: one hash slot per topic, one spelling per field name."""

from __future__ import annotations

import re

from hub.store import keys, scripts


def test_a_topic_keys_share_one_hash_tag() -> None:
    made = [
        keys.events("t"),
        keys.idempotency("t", "k"),
        keys.subscriptions("t"),
        keys.cursors("t"),
        keys.pages("t"),
        keys.pages_head("t"),
        keys.resourcelist_snapshot("t"),
        keys.resourcelist_page("t", "1", 0),
        keys.resources("t"),
        keys.topic_meta("t"),
        keys.pinged("t"),
        keys.dead_letters("t", "0123456789ab"),
        keys.dead_letter_replay("t", "0123456789ab"),
    ]
    assert len(set(made)) == len(made)
    assert {re.search(r"\{([^}]*)\}", k).group(1) for k in made} == {"t"}  # type: ignore[union-attr]


def test_scripts_have_every_placeholder_filled() -> None:
    for script in (scripts.APPEND, scripts.ADVANCE_PAGES):
        assert not re.search(r"\$[A-Z_]+", script.source)
        assert len(script.sha) == 40
    assert f"'{keys.TRIMMED_THROUGH}'" in scripts.APPEND.source
    assert f"'{keys.TRIMMED_THROUGH}'" in scripts.ADVANCE_PAGES.source
    assert f"'{keys.HEAD_SCANNED}'" in scripts.ADVANCE_PAGES.source


def test_reply_decoders() -> None:
    rows = [(b"1-0", {keys.EVENT_FIELD: b"{}"}), ("2-0", {keys.EVENT_FIELD: "{}"})]
    assert keys.event_rows(rows) == [("1-0", b"{}"), ("2-0", b"{}")]
    assert keys.first_row_id(rows) == "1-0"
    assert keys.first_row_id([]) is None
    assert keys.xread_rows([[b"stream", rows]]) == keys.event_rows(rows)
    assert keys.xread_rows(None) == []
    assert keys.optional_text(None) is None and keys.text(3) == "3"
