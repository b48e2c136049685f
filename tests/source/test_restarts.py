"""A Source that crashes anywhere pushes each change once: a push sent but not marked done
is sent again with the same Idempotency-Key (the hub answers from what it stored), a
change recorded but not pushed is pushed at the restart, and a change never recorded is
found by the restart's scan."""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path

import pytest

from publisher.client import Publisher
from rsclient.statefile import StateFile
from source.documents import Site, change_entry
from source.inventory import Inventory
from source.runtime import resolved_directory
from source.tree import scan
from tests.conftest import Hub
from tests.publisher.helpers import stored_events
from tests.source.support import SourceProcess, in_process_source
from tests.support import free_port, wait_for

pytestmark = pytest.mark.timeout(180)


async def test_a_push_sent_before_a_crash_is_not_stored_twice(
    hub: Hub, redis_url: str, tmp_path: Path
) -> None:
    topic = f"crash-{uuid.uuid4().hex[:8]}"
    root, state = tmp_path / "dir", tmp_path / "state.json"
    root.mkdir()
    for i in range(30):
        (root / f"f{i}.txt").write_text(f"{i}\n")
    port = free_port()
    directory = resolved_directory(str(root))
    site = Site(f"http://127.0.0.1:{port}", hub=hub.url, topic=topic)
    # What a Source did before it crashed: it recorded the files, marked a push of 30
    # changes pending, saved, sent it, and died before it could mark it done.
    inventory = Inventory(directory, site.base_url)
    inventory.reconcile("", scan(directory, "", {}))
    pending = inventory.next_push(1000)
    assert pending is not None and pending.count == 30
    StateFile(state).save(inventory.to_json())
    entries = [change_entry(site, c) for c in inventory.history]
    async with Publisher(hub.url, topic, up=site.capabilitylist_url) as publisher:
        first = await publisher.send(entries, idempotency_key=pending.key)
    assert not first.replayed and len(await stored_events(redis_url, topic)) == 30

    async with in_process_source(root, state, hub=hub.url, topic=topic, port=port) as source:
        inventory = source.runtime.inventory
        await wait_for(lambda: inventory.pushed == 30 and inventory.pending is None, 20)
        assert len(await stored_events(redis_url, topic)) == 30  # replayed, not stored again
        (root / "f0.txt").write_text("after the restart\n")
        await wait_for(lambda: inventory.pushed == 31, 20)
    stored = await stored_events(redis_url, topic)
    assert len(stored) == 31
    assert [e["change"] for e in stored].count("updated") == 1


async def test_a_killed_source_loses_and_repeats_nothing(
    hub: Hub, redis_url: str, tmp_path: Path
) -> None:
    """SIGKILL in the middle of a burst of changes, then a restart: the hub ends with the
    latest state of every file, each change of the Source's history stored once."""
    topic = f"kill-{uuid.uuid4().hex[:8]}"
    root, state = tmp_path / "dir", tmp_path / "state.json"
    root.mkdir()
    source = SourceProcess(root, state, "--hub", hub.url, "--topic", topic)
    await source.start()
    try:
        for i in range(200):
            (root / f"f{i}.txt").write_text(f"{i}\n")
            if i == 120:
                assert source.command is not None and source.command.proc is not None
                os.kill(source.command.proc.pid, signal.SIGKILL)
        assert source.command is not None
        await source.command.wait(20)
        await source.start()
        saved = StateFile(state)

        async def all_pushed() -> bool:
            data = saved.load() or {}
            history = data.get("history", [])
            return (
                len(data.get("files", {})) == 200
                and data.get("pushed") == len(history)
                and len(await stored_events(redis_url, topic)) == len(history)
            )

        await wait_for(all_pushed, timeout=60)
        stored = await stored_events(redis_url, topic)
        keys = [(e["loc"], e["change"], e["lastmod"]) for e in stored]
        assert len(set(keys)) == len(keys)
        assert {str(e["loc"]).rsplit("/", 1)[1] for e in stored} == {
            f"f{i}.txt" for i in range(200)
        }
    finally:
        if source.command is not None:
            await source.command.stop()
