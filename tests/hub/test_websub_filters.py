"""``hub.filter.change``/``hub.filter.prefix`` on a WebSub subscription, and the same filter
in the subscriber library and ``rshub subscribe``, on a real hub and Redis.

The hub filters (with the one :class:`hub.core.events.EventFilter` its streams use); a
change filtered out still moves the subscription's cursor on.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest

from hub.web.app import RUNTIME
from subscriber import HubStream
from subscriber.filters import ChangeFilter
from tests.commands import Command
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_websub import subscribe
from tests.support import notification, wait_for

A, B, C = "http://example.org/a/", "http://example.org/b/", "http://example.org/c/"
#: (loc, change) published in this order; the filter below keeps the starred ones.
MIXED = [
    (A + "1", "created"),  # *
    (C + "1", "created"),
    (B + "1", "deleted"),
    (B + "2", "updated"),  # *
    (A + "2", "deleted"),
    (C + "2", "updated"),
    (A + "3", "updated"),  # *
]
WANTED = [0, 3, 6]
FILTER_FORM = {"hub.filter.change": "created,updated"}


@pytest.fixture
async def callback() -> AsyncIterator[CallbackServer]:
    server = await CallbackServer().start()
    yield server
    await server.stop()


async def publish(hub: Hub, rows: list[tuple[str, str]]) -> list[str]:
    resp = await hub.publish("t", notification([{"loc": u, "change": c} for u, c in rows]))
    assert resp.status == 202
    ids: list[str] = orjson.loads(await resp.read())["ids"]
    return ids


async def subscribe_filtered(hub: Hub, cb: CallbackServer, *prefixes: str) -> None:
    """Subscribe with :data:`FILTER_FORM` and ``prefixes`` (a repeated parameter)."""
    form = [
        ("hub.mode", "subscribe"),
        ("hub.topic", f"{hub.url}/topics/t"),
        ("hub.callback", cb.url),
        *FILTER_FORM.items(),
        *(("hub.filter.prefix", p) for p in prefixes),
    ]
    async with hub.session.post(hub.url + "/", data=form) as resp:
        assert resp.status == 202, await resp.text()
    workers = hub.app[RUNTIME].delivery.workers
    await wait_for(lambda: ("t", cb.url) in workers)


async def test_a_subscription_gets_only_the_changes_its_filter_lets_through(
    hub: Hub, callback: CallbackServer
) -> None:
    await subscribe_filtered(hub, callback, A, B)
    ids = []
    for row in MIXED:  # one publish each: several deliveries, each filtered
        ids += await publish(hub, [row])
    ids += await publish(hub, MIXED)  # and one batch mixing both
    wanted = [ids[i] for i in WANTED] + [ids[len(MIXED) + i] for i in WANTED]
    await wait_for(lambda: len(callback.ids) >= len(wanted))
    await wait_for(lambda: hub.app[RUNTIME].delivery.workers[("t", callback.url)].delivered >= 6)
    assert callback.ids == wanted
    assert callback.locs == [MIXED[i][0] for i in WANTED] * 2
    # The cursor is at the last event.
    assert await hub.app[RUNTIME].subscriptions.cursor("t", callback.url) == ids[-1]


async def test_a_batch_entirely_filtered_out_sends_nothing_but_advances_the_cursor(
    hub: Hub, callback: CallbackServer
) -> None:
    await subscribe_filtered(hub, callback, A)
    store = hub.app[RUNTIME].subscriptions
    skipped = await publish(hub, [(C + "1", "created"), (A + "1", "deleted")])

    async def cursor_at(event_id: str) -> bool:
        return await store.cursor("t", callback.url) == event_id

    await wait_for(lambda: cursor_at(skipped[-1]))
    [kept] = await publish(hub, [(A + "9", "updated")])
    await wait_for(lambda: len(callback.deliveries) >= 1)
    assert callback.ids == [kept] and len(callback.deliveries) == 1
    await wait_for(lambda: cursor_at(kept))


async def test_a_resubscription_without_a_filter_gets_everything_again(
    hub: Hub, callback: CallbackServer
) -> None:
    await subscribe_filtered(hub, callback, A)
    await subscribe(hub, callback)  # no hub.filter.*: the new terms have none
    workers = hub.app[RUNTIME].delivery.workers

    def unfiltered() -> bool:  # the old worker stops before the new one starts
        worker = workers.get(("t", callback.url))
        return worker is not None and worker.terms.filter is None

    await wait_for(unfiltered)
    ids = await publish(hub, MIXED)
    await wait_for(lambda: len(callback.ids) >= len(MIXED))
    assert callback.ids == ids


@pytest.mark.parametrize("transport", ["ws", "sse"])
async def test_the_library_asks_streams_for_the_same_filter(hub: Hub, transport: str) -> None:
    first = await publish(hub, [(A + "0", "updated")])
    ids = await publish(hub, MIXED)
    wanted = ChangeFilter.of(["created", "updated"], [A, B])
    async with aiohttp.ClientSession() as session:
        stream = HubStream(
            session, hub.url, "t", transport=transport, since=first[0], event_filter=wanted
        )  # type: ignore[arg-type]
        got: list[str | None] = []
        async for batch in stream.batches():
            got += [e.id for e in batch]
            if len(got) >= len(WANTED):
                break
    assert got == [ids[i] for i in WANTED]


@pytest.mark.parametrize("via", ["webhook", "ws", "poll"])
@pytest.mark.parametrize("hub_settings", [{"changelist_scan_seconds": 0.05}])
async def test_rshub_subscribe_change_and_prefix(hub: Hub, via: str) -> None:
    argv = ["--hub", hub.url, "--topic", "t", "--via", via, "--interval", "0.1", "-v"]
    argv += ["--change", "created,updated", "--prefix", A, "--prefix", B, "--limit", "3"]
    await publish(hub, [(C + "0", "updated")])  # the topic exists: polling starts at its end
    cmd = await Command("subscribe", *argv).start()
    try:
        await wait_for(
            lambda: "now push" in cmd.stderr or "polling from the current end" in cmd.stderr, 20
        )
        ids = await publish(hub, MIXED)
        assert await cmd.wait() == 0, cmd.stderr
    finally:
        await cmd.stop()
    events = [orjson.loads(line) for line in cmd.lines]
    assert [e["loc"] for e in events] == [MIXED[i][0] for i in WANTED]
    if via != "poll":  # a polled Change List carries no event ids
        assert [e["id"] for e in events] == [ids[i] for i in WANTED]


def test_rshub_subscribe_refuses_an_unknown_change_type() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rshub",
            "subscribe",
            "--hub",
            "http://hub.invalid",
            "--topic",
            "t",
            "--change",
            "moved",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2 and "--change: change types are created" in done.stderr
