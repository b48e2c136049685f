"""``rshub sync --via webhook`` applies an operator's replay of dead letters
(``X-RSHub-Replay``): each replayed change only when it is newer than what the mirror
applied for its resource, so a dead-lettered creation arrives and an old deletion never
undoes a later creation.

Real parts: an in-process hub (short retry window) on the session's Redis, a real Source,
``rshub sync`` as a child process with its own WebSub callback, reached by the hub through
a small forwarding server that can refuse deliveries (the callback "down").
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from hub.core.placement import subscription_id
from hub.web.app import RUNTIME
from tests.conftest import Hub
from tests.support import free_port, wait_for

from .helpers import Child, expected_files, mirror_files, publish
from .source import TestSource
from .test_sync_gap import _body, _post, _queued, receiver  # noqa: F401  (a fixture)

pytestmark = pytest.mark.timeout(90)

_HOP = {"host", "content-length", "transfer-encoding", "connection"}


class Forwarder:
    """Forwards every request to ``target``; while ``down``, deliveries (POST) get 500."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.down = False
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> Forwarder:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        self._session = aiohttp.ClientSession()
        return self

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _forward(self, request: web.Request) -> web.Response:
        if self.down and request.method == "POST":
            return web.Response(status=500, text="down")
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with self._session.request(
            request.method,
            self.target + request.path_qs,
            data=await request.read(),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=10),
        ) as resp:
            return web.Response(status=resp.status, body=await resp.read())


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"retry_base_seconds": 0.02, "retry_max_seconds": 0.1, "retry_window_seconds": 0.5}


@pytest.fixture
async def source() -> AsyncIterator[TestSource]:
    src = TestSource()
    await src.start()
    yield src
    await src.stop()


async def test_sync_applies_a_replayed_dead_letter_unless_its_resource_changed_since(
    tmp_path: Any, hub: Hub, source: TestSource
) -> None:
    listen = free_port()
    forwarder = await Forwarder(f"http://127.0.0.1:{listen}").start()
    dest = tmp_path / "mirror"
    child = Child(
        tmp_path / "sync.log",
        "sync",
        "--dest",
        str(dest),
        "--hub",
        hub.url,
        "--topic",
        "docs",
        "--via",
        "webhook",
        "--listen",
        f"127.0.0.1:{listen}",
        "--callback-url",
        forwarder.url,
        "--interval",
        "60",
        "--no-progress",
        "-v",
    )

    def converged() -> bool:
        return mirror_files(dest) == expected_files(source.url, source.files)

    subs = hub.app[RUNTIME].subscriptions
    try:
        await publish(hub.session, hub.url, "docs", [source.put("a", b"a1"), source.put("b", b"b")])
        child.start()

        async def subscribed() -> bool:
            return bool(await subs.for_topic("docs"))

        await wait_for(lambda: converged(), 20)
        await wait_for(subscribed, 20)
        (sub,) = await subs.for_topic("docs")
        sub_id = subscription_id("docs", sub.callback)
        letters = f"{hub.url}/admin/subscriptions/{sub_id}/dead-letters"

        # The callback is down past the retry window: a creation and a deletion are
        # dead-lettered.
        forwarder.down = True
        await publish(hub.session, hub.url, "docs", [source.put("x", b"x"), source.delete("a")])

        async def dead_lettered() -> bool:
            async with hub.session.get(letters) as resp:
                return (await resp.json())["total"] == 2

        await wait_for(dead_lettered, 20)
        # Back up: "a" is created again, live, after its dead-lettered deletion.
        forwarder.down = False
        await publish(hub.session, hub.url, "docs", [source.put("a", b"a2"), source.put("y", b"y")])
        held = expected_files(source.url, {"a": b"a2", "b": b"b", "y": b"y"})
        await wait_for(lambda: mirror_files(dest) == held, 20)

        asked = len(source.requests)
        async with hub.session.post(f"{letters}/replay") as resp:
            assert resp.status == 200, await resp.text()
            done = await resp.json()
        assert (done["replayed"], done["remaining"], done["error"]) == (2, 0, None), done
        # The dead-lettered creation is applied; the deletion, older than "a"'s creation,
        # is not: nothing asks the Source about "a" again, and "a" stays.
        await wait_for(converged, 20)
        assert child.stop() == 130, child.log()[-3000:]
        assert ("/files/x", 200) in source.requests[asked:], source.requests[asked:]
        assert all(path != "/files/a" for path, _ in source.requests[asked:])
        assert mirror_files(dest) == expected_files(source.url, source.files)
    finally:
        if child.proc is not None and child.proc.poll() is None:
            child.stop()
        await forwarder.stop()


async def test_a_replayed_deletion_removes_only_what_the_source_no_longer_has(
    tmp_path: Any, source: TestSource
) -> None:
    """The position may have forgotten a resource (or never seen it: a baseline): the
    mirror then asks the Source before it removes anything for a replayed deletion."""
    from subscriber.events import ChangeEvent
    from subscriber.mirror import Mirror

    def replayed(name: str) -> ChangeEvent:
        when = "2026-01-01T00:00:00Z"
        return ChangeEvent(source.loc(name), when, "deleted", id="1-0", replayed=True)

    kept, gone = source.put("kept", b"k"), source.put("gone", b"g")
    async with aiohttp.ClientSession() as session:
        mirror = Mirror(tmp_path, session)
        await mirror.apply([ChangeEvent(c["loc"], c["lastmod"], c["change"]) for c in (kept, gone)])
        assert mirror_files(tmp_path) == expected_files(source.url, source.files)
        source.delete("gone")
        await mirror.apply([replayed("kept"), replayed("gone")])
    assert mirror_files(tmp_path) == expected_files(source.url, {"kept": b"k"})
    assert (mirror.stats.deleted, mirror.stats.gone, mirror.stats.problems) == (0, 1, [])


# -- the replay header: not signed, where another party's bytes enter the subscriber ------


async def test_the_unsigned_replay_header_only_makes_an_event_considered(
    receiver: Any,  # noqa: F811  (the fixture imported above)
) -> None:
    """``X-RSHub-Replay`` is outside the signature: with it, a signed body's events are
    judged per resource (so a forged header can replay nothing stale); any other value
    is no replay; an unsigned or wrongly signed body is dropped whatever the header."""
    from subscriber.position import EventCursor
    from tests.watchdog import Watchdog

    rx, session = receiver
    replay = {"X-RSHub-Replay": "dead-letter"}
    async with Watchdog() as dog:
        assert await _post(session, rx, _body(None, entries=2), **replay) == 204
        assert await _post(session, rx, _body(None, entries=1), **{"X-RSHub-Replay": "x"}) == 204
        assert await _post(session, rx, _body(None, entries=1), sign=False, **replay) == 202
        assert rx.rejected == 1
        first, second = _queued(rx)
        assert [(e.id, e.replayed) for e in first] == [("9-0", True), ("9-1", True)]
        assert [(e.id, e.replayed) for e in second] == [("9-0", False)]
        # The cursor already handed over r0 at 9-0 (and is past 9-1): the replay of r0 is
        # refused by its resource, r1 (never handed over) is taken; the plain one is old.
        cursor = EventCursor()
        cursor.accept(replace(second[0], id="9-0"))
        cursor.accept(replace(second[0], loc="http://example.org/other", id="10-0"))
        assert [cursor.accept(e) for e in first] == [False, True]
        assert not cursor.accept(second[0]) and cursor.event_id == "10-0"
    await dog.sockets_back()


def test_a_seeded_fuzz_of_live_and_replayed_events_keeps_each_resource_newest() -> None:
    """Live events in id order, replays of any older id in between, duplicates of both:
    a resource's events are handed over in increasing id order, every live one newer than
    the position is, and a replay exactly when it is newer than its resource's last."""
    import random

    from subscriber.events import ChangeEvent
    from subscriber.position import EventCursor

    rng = random.Random(20261124)
    replays_taken = replays_refused = 0
    for _round in range(50):
        cursor = EventCursor()
        last: dict[str, int] = {}  # the model: per resource, the newest id handed over
        delivered: list[ChangeEvent] = []
        letters: list[ChangeEvent] = []  # dead-lettered: never delivered live
        for n in range(1, 300):
            loc = f"r{rng.randrange(8)}"
            change = rng.choice(("created", "updated", "deleted"))
            when = f"2026-01-01T{n // 3600:02d}:{n // 60 % 60:02d}:{n % 60:02d}Z"
            event = ChangeEvent(loc, when, change, f"{n}-0")
            roll = rng.random()
            if roll < 0.15:
                letters.append(event)
                continue
            if roll < 0.65 or not (letters or delivered):
                pick, want = event, True
                delivered.append(event)
            elif roll < 0.9:
                pick = replace(rng.choice(letters or delivered), replayed=True)
                want = _order(pick) > last.get(pick.loc, 0)
                replays_taken += want
                replays_refused += not want
            elif delivered:
                pick, want = rng.choice(delivered), False  # a live duplicate
            else:
                continue
            assert cursor.accept(pick) is want, (pick, last.get(pick.loc))
            if want:
                last[pick.loc] = _order(pick)
    assert replays_taken > 100 and replays_refused > 100, (replays_taken, replays_refused)


def _order(event: Any) -> int:
    return int(event.id.split("-")[0])
