"""The edit-feed follower: the shipped recording, replay, live SSE, resume from the state."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from itertools import islice
from pathlib import Path

from publisher import BatchPolicy, Publisher, RetryPolicy
from publisher.editfeed import (
    follow,
    read_recording,
    replay,
    sample_path,
    saved_position,
    stream,
)
from publisher.feed_generator import write
from publisher.state import StateFile
from publisher.wikipedia import EditFilter, changes_from_event
from tests.conftest import Hub

from .helpers import SSEServer, serve, stored_events

FAST = RetryPolicy(base=0.01, max_delay=0.05)
BATCH = BatchPolicy(max_changes=200, max_wait=0.01)


def expected(events: list, edit_filter: EditFilter | None = None) -> list[tuple[str, str]]:
    out = []
    for event in events:
        if edit_filter is None or edit_filter.accepts(event.data):
            out += [(e.loc, str(e.change)) for e in changes_from_event(event.data)]
    return out


def test_shipped_sample_is_generated_and_covers_every_kind(tmp_path: Path) -> None:
    path = sample_path()
    with gzip.open(path, "rt") as handle:
        header = json.loads(handle.readline())
    assert header["generated"] is True and "GENERATED" in header["note"]
    events = list(read_recording(path))
    assert len(events) >= 2000
    assert len({e.data["wiki"] for e in events}) >= 5
    kinds = Counter(
        e.data["type"]
        if e.data["type"] != "log"
        else f"{e.data['log_type']}/{e.data['log_action']}"
        for e in events
    )
    for kind in ("new", "edit", "categorize", "delete/delete", "delete/restore", "move/move"):
        assert kinds[kind] > 10, kind
    assert all(json.loads(e.id)[0]["topic"].endswith("mediawiki.recentchange") for e in events)
    # The shipped file is exactly what the generator writes.
    write(tmp_path / "again.jsonl.gz")
    assert (tmp_path / "again.jsonl.gz").read_bytes() == path.read_bytes()


async def test_replay_publishes_every_change_and_resumes_after_restart(
    hub: Hub, redis_url: str, tmp_path: Path
) -> None:
    sample = sample_path()
    state = StateFile(tmp_path / "state.json")
    source = str(sample)
    async with Publisher(hub.url, "wiki", batching=BATCH, retry=FAST) as pub:
        first = await follow(replay(sample), pub, state=state, source=source, limit=700)
    assert first.read == 700
    position = saved_position(state, source)
    assert position == first.position
    async with Publisher(hub.url, "wiki", batching=BATCH, retry=FAST) as pub:
        second = await follow(
            replay(sample, after=position), pub, state=state, source=source, position=position
        )
    events = list(read_recording(sample))
    assert first.read + second.read == len(events)
    assert saved_position(state, source) == events[-1].id
    stored = await stored_events(redis_url, "wiki")
    assert [(e["loc"], e["change"]) for e in stored] == expected(events)
    assert first.changes + second.changes == len(stored)
    assert {"created", "updated", "deleted"} <= set(first.by_change)


async def test_filters_apply(hub: Hub, redis_url: str) -> None:
    events = list(islice(read_recording(sample_path()), 400))
    only = EditFilter.of(wikis=["enwiki", "de.wikipedia.org"], namespaces=[0], bots=False)
    async with Publisher(hub.url, "wiki", batching=BATCH, retry=FAST) as pub:
        stats = await follow(replay(sample_path()), pub, edit_filter=only, limit=400)
    stored = await stored_events(redis_url, "wiki")
    assert [(e["loc"], e["change"]) for e in stored] == expected(events, only)
    assert stats.filtered > 0 and stored


async def test_live_stream_reconnects_and_resumes_from_last_event_id(
    hub: Hub, redis_url: str, tmp_path: Path
) -> None:
    events = list(islice(read_recording(sample_path()), 300))
    server = SSEServer([(e.id, json.dumps(e.data)) for e in events], cut_after=50)
    state = StateFile(tmp_path / "state.json")
    async with serve(server.app) as base:
        url = f"{base}/stream"
        async with Publisher(hub.url, "wiki", batching=BATCH, retry=FAST) as pub:
            await follow(stream(url, reconnect_delay=0.01), pub, state=state, source=url, limit=200)
        position = saved_position(state, url)
        assert position == events[199].id
        # a restart: a new process resumes from the saved id
        async with Publisher(hub.url, "wiki", batching=BATCH, retry=FAST) as pub:
            await follow(
                stream(url, after=position),
                pub,
                state=state,
                source=url,
                position=position,
                limit=100,
            )
    assert server.last_event_ids == [None, events[49].id, events[199].id]
    stored = await stored_events(redis_url, "wiki")
    assert [(e["loc"], e["change"]) for e in stored] == expected(events)
