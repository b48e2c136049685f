"""The bridge against a live resync-simulator: every change reaches a hub subscriber once.

"Reaching a subscriber" is checked on the topic's event stream in Redis (``XRANGE``), which
is exactly what every hub subscriber is served, event id for event id. (Reading the hub's
SSE stream instead works too, but the hub's feed currently stalls on idle topics: its
``XREAD BLOCK 5000`` races redis-py 8's default 5 s socket timeout.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from publisher import BatchPolicy, Publisher, RetryPolicy
from publisher.bridge import Bridge
from publisher.position import in_order
from publisher.state import StateFile
from resourcesync import ChangeList, format_datetime, parse
from tests.conftest import Hub
from tests.support import wait_for

from .helpers import stored_events
from .simulator import Simulator

FAST = RetryPolicy(base=0.01, max_delay=0.05)


async def _at_least(count: Awaitable[int], n: int) -> bool:
    return await count >= n


@pytest.mark.parametrize("spec_version", ["1.1", "1.0"])
async def test_every_simulator_change_reaches_a_subscriber_exactly_once(
    hub: Hub, redis_url: str, tmp_path: Path, spec_version: str
) -> None:
    """Two bridge processes in turn (a restart part-way), 1.0 and 1.1 Change Lists."""
    received: list[dict[str, Any]] = []

    async def stored() -> int:
        received[:] = await stored_events(redis_url, "sim")
        return len(received)

    state = StateFile(tmp_path / "bridge.json")
    events = 120
    async with Simulator(
        tmp_path / "sim", events=events, delay=0.01, spec_version=spec_version
    ) as sim:

        async def run_bridge() -> None:
            async with Publisher(
                hub.url, "sim", retry=FAST, batching=BatchPolicy(max_changes=100)
            ) as pub:
                await Bridge(
                    f"{sim.url}/.well-known/resourcesync", pub, state=state, chunk_size=25
                ).run(interval=0.05)

        # first bridge process: stopped part-way (a restart), the second one finishes
        bridge = asyncio.create_task(run_bridge())
        await wait_for(lambda: _at_least(stored(), 30), timeout=20)
        bridge.cancel()
        await asyncio.gather(bridge, return_exceptions=True)
        bridge = asyncio.create_task(run_bridge())

        await wait_for(lambda: sim.done, timeout=30)
        final = parse(await sim.changelist(), validate=False)
        assert isinstance(final, ChangeList)
        await wait_for(lambda: _at_least(stored(), len(final.entries)), timeout=20)
        bridge.cancel()
        await asyncio.gather(bridge, return_exceptions=True)
        await stored()  # nothing more arrived after the last change

    # resync-simulator's 1.0 deletions carry no time at all: they get the one before them
    entries, _untimed = in_order(final.entries, final.md.from_)
    assert len(entries) == len(final.entries)
    expected = [
        (e.loc, str(e.change), format_datetime(e.change_time))  # type: ignore[arg-type]
        for e in entries
    ]
    assert [(e["loc"], e["change"], e["lastmod"]) for e in received] == expected
    assert len({e["id"] for e in received}) == len(received)
