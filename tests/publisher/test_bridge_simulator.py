"""The bridge against a live resync-simulator: every change reaches a hub subscriber once."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from publisher import BatchPolicy, Publisher, RetryPolicy
from publisher.bridge import Bridge
from publisher.position import in_order
from publisher.sse import EventSource
from publisher.state import StateFile
from resourcesync import ChangeList, format_datetime, parse
from tests.conftest import Hub
from tests.support import wait_for

from .simulator import Simulator

FAST = RetryPolicy(base=0.01, max_delay=0.05)


async def subscribe(url: str, into: list[dict[str, Any]]) -> None:
    """A hub subscriber: the topic's server-sent events, from the start."""
    async for event in EventSource(url, last_event_id="0-0", reconnect_delay=0.05):
        into.append(json.loads(event.data))


@pytest.mark.parametrize("spec_version", ["1.1", "1.0"])
async def test_every_simulator_change_reaches_a_subscriber_exactly_once(
    hub: Hub, tmp_path: Path, spec_version: str
) -> None:
    received: list[dict[str, Any]] = []
    state = StateFile(tmp_path / "bridge.json")
    events = 120
    async with Simulator(tmp_path / "sim", events=events, delay=0.01,
                         spec_version=spec_version) as sim:
        subscriber = asyncio.create_task(
            subscribe(f"{hub.url}/topics/sim/events", received))

        async def run_bridge() -> None:
            async with Publisher(hub.url, "sim", retry=FAST,
                                 batching=BatchPolicy(max_changes=100)) as pub:
                await Bridge(f"{sim.url}/.well-known/resourcesync", pub, state=state,
                             chunk_size=25).run(interval=0.05)

        # first bridge process: stopped part-way (a restart), the second one finishes
        bridge = asyncio.create_task(run_bridge())
        await wait_for(lambda: len(received) >= 30, timeout=20)
        bridge.cancel()
        await asyncio.gather(bridge, return_exceptions=True)
        bridge = asyncio.create_task(run_bridge())

        await wait_for(lambda: sim.done, timeout=30)
        final = parse(await sim.changelist(), validate=False)
        assert isinstance(final, ChangeList)
        await wait_for(lambda: len(received) >= len(final.entries), timeout=20)
        bridge.cancel()
        subscriber.cancel()
        await asyncio.gather(bridge, subscriber, return_exceptions=True)

    # resync-simulator's 1.0 deletions carry no time at all: they get the one before them
    entries, _untimed = in_order(final.entries, final.md.from_)
    expected = [(e.loc, str(e.change), format_datetime(e.change_time))  # type: ignore[arg-type]
                for e in entries]
    assert len(entries) == len(final.entries)
    assert [(e["loc"], e["change"], e["lastmod"]) for e in received] == expected
    assert len({e["id"] for e in received}) == len(received)
