"""One stream, a thousand topics: publish across all of them while connected, drop the
connection mid-way, resume with the last id received, and count.

For SSE and WebSocket alike: every topic under the prefix ``mt-`` (1,000 published to
before the stream opens, and more first published while it runs and while its client is
away) gets changes in rounds; the client reads about half of them, hangs up without a
word, and resumes with the last id it got (SSE ``Last-Event-ID``, WebSocket ``since=``).
Lost, out of order within a topic, and repeated across the resume must all be 0; the
figures are printed (``-s``).
"""

from __future__ import annotations

import asyncio
import itertools
import statistics
import time
from collections import defaultdict
from typing import Any

import pytest

from tests.conftest import Hub
from tests.hub.topic_streams import Reader
from tests.support import TIME_SCALE, changes, notification

TOPICS = 1000
ROUNDS = 3
#: Topics first published while the stream is open, and while its client is away.
LATE, AWAY = 20, 10


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"stream_topic_scan_seconds": 0.2, "heartbeat_seconds": 1}


async def _publish_rounds(hub: Hub, names: list[str], rounds: int) -> list[tuple[str, str]]:
    """Each topic gets a change per round, eight publishes at a time; (topic, id) of each."""
    out: list[tuple[str, str]] = []
    gate = asyncio.Semaphore(8)

    async def one(name: str, n: int) -> None:
        async with gate:
            resp = await hub.publish(name, notification(changes(1, start=n)))
            assert resp.status == 202
            out.extend((name, i) for i in (await resp.json())["ids"])

    for n in range(rounds):
        await asyncio.gather(*(one(name, n) for name in names))
    return out


def _count(expected: list[tuple[str, str]], got: list[tuple[str, str]]) -> dict[str, int]:
    wanted = set(expected)
    per_topic: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for topic, eid in got:
        ms, seq = eid.split("-")
        per_topic[topic].append((int(ms), int(seq)))
    return {
        "lost": len(wanted - set(got)),
        "out_of_order": sum(
            1 for keys in per_topic.values() for a, b in itertools.pairwise(keys) if b <= a
        ),
        "duplicates": len(got) - len(set(got)),
        "unexpected": len(set(got) - wanted),
    }


@pytest.mark.timeout(600)
@pytest.mark.parametrize("transport", ["sse", "ws"])
async def test_a_thousand_topics_on_one_connection_resume_exactly(hub: Hub, transport: str) -> None:
    names = [f"mt-{i:04d}" for i in range(TOPICS)]
    started = time.monotonic()
    await _publish_rounds(hub, names, 1)  # the topics exist before the stream opens
    url = f"{hub.url}/{'events' if transport == 'sse' else 'ws'}?topic_prefix=mt-"
    first, second = Reader(), Reader()
    session = hub.session
    half = (TOPICS * ROUNDS) // 2

    # -- connected: read until about half of the changes came, then hang up unannounced
    async with asyncio.timeout(120 * TIME_SCALE):
        if transport == "sse":
            resp = await session.get(url)
            assert resp.status == 200
            reading = asyncio.create_task(first.sse(resp, first.count(half)))
        else:
            ws = await session.ws_connect(url)
            reading = asyncio.create_task(first.ws(ws, first.count(half)))
        await first.opened.wait()  # the stream's opening id: it is following
        late = [f"mt-late-{i:03d}" for i in range(LATE)]
        publishing = asyncio.create_task(_publish_rounds(hub, names + late, ROUNDS))
        await reading
        if transport == "sse":
            resp.close()  # whatever was on its way is lost with the connection
        else:
            ws._response.close()  # no close frame: a drop (aiohttp has no public abort)
    dropped_at = len(first.events)
    # -- away: topics first published while no stream follows them
    away = [f"mt-away-{i:03d}" for i in range(AWAY)]
    expected = await _publish_rounds(hub, away, 1)
    expected += await publishing
    # -- resumed from the last id the client got
    assert first.last_id is not None
    total = len(expected)
    done = lambda: len(first.events) + len(second.events) >= total  # noqa: E731
    async with asyncio.timeout(120 * TIME_SCALE):
        if transport == "sse":
            async with session.get(url, headers={"Last-Event-ID": first.last_id}) as resp:
                assert resp.status == 200, await resp.text()
                await second.sse(resp, done)
        else:
            async with session.ws_connect(url, params={"since": first.last_id}) as ws:
                await second.ws(ws, done)
    figures = _count(expected, first.pairs() + second.pairs())
    lengths = [len(i) for i in first.ids + second.ids]
    print(
        f"\n{transport}: {TOPICS + LATE + AWAY} topics on one connection "
        f"({LATE} first published while connected, {AWAY} while away); {total} changes "
        f"published while following; {dropped_at} received before the drop, "
        f"{len(second.events)} after the resume; lost {figures['lost']}, out of order "
        f"{figures['out_of_order']}, duplicates {figures['duplicates']}, unexpected "
        f"{figures['unexpected']}; ids: median {statistics.median(lengths):.0f} bytes, longest "
        f"{max(lengths)}; {time.monotonic() - started:.1f} s"
    )
    assert figures == {"lost": 0, "out_of_order": 0, "duplicates": 0, "unexpected": 0}
    assert 0 < dropped_at < total
