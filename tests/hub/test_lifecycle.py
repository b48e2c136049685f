"""One lifecycle: every long-lived task of the hub runs in one task tree, stopped one way."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from hub.core.settings import Settings
from hub.core.tasks import Tasks
from hub.web.app import RUNTIME
from tests.conftest import start_hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_websub import subscribe
from tests.support import TIME_SCALE, changes, free_port, notification, wait_for
from tests.watchdog import open_sockets, sockets_back

# -- the task group -------------------------------------------------------------------------


async def test_tasks_stop_in_reverse_order_of_start() -> None:
    stopped: list[str] = []

    async def run(name: str) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            stopped.append(name)

    root = Tasks("root")
    root.spawn("first", run("first"))
    child = root.group("child")
    child.spawn("child-a", run("child-a"))
    child.spawn("child-b", run("child-b"))
    root.spawn("last", run("last"))
    await asyncio.sleep(0)
    assert root.names() == ["root/first", "root/child/child-a", "root/child/child-b", "root/last"]
    await root.stop()
    assert stopped == ["last", "child-b", "child-a", "first"]
    assert len(root) == 0


async def test_a_task_that_ignores_cancellation_does_not_hang_stop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue  # swallowed, as a client library mid-call might

    timeout = 0.2 * TIME_SCALE
    group = Tasks("g", timeout=timeout)
    group.spawn("stubborn", stubborn())
    await asyncio.sleep(0)
    started = time.monotonic()
    await group.stop()
    assert time.monotonic() - started < timeout + 2.0 * TIME_SCALE
    assert "stubborn did not stop" in caplog.text
    release.set()


async def test_periodic_steps_stop_by_event_and_failures_are_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs: list[int] = []

    async def step() -> None:
        runs.append(len(runs))
        if len(runs) == 1:
            raise LookupError("away for a moment")

    group = Tasks("g")
    group.every(0.01, "job", step, retry_on=LookupError)
    await wait_for(lambda: len(runs) >= 3)
    await group.stop()
    assert "job failed: away for a moment" in caplog.text
    assert len(group) == 0


async def test_a_stopped_group_starts_nothing_and_a_failed_task_is_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def fail() -> None:
        raise ValueError("broken")

    group = Tasks("g")
    task = group.spawn("failing", fail())
    await wait_for(task.done)
    assert len(group) == 0  # forgotten once it ended
    assert any(r.levelno == logging.ERROR and "failing" in r.getMessage() for r in caplog.records)
    await group.stop()
    coro = asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="stopping"):
        group.spawn("late", coro)
    with pytest.raises(RuntimeError, match="stopping"):
        group.group("late")


# -- the hub's tree -------------------------------------------------------------------------


@pytest.fixture
async def callback() -> AsyncIterator[CallbackServer]:
    server = await CallbackServer().start()
    yield server
    await server.stop()


_HUB_TASK_PREFIXES = (
    "feed:",
    "deliver:",
    "verify:",
    "heartbeat",
    "ownership",
    "subscription-changes",
    "redis-health",
    "retention",
    "page-scan",
    "cursor-writer",
)


def _hub_tasks() -> set[asyncio.Task[Any]]:
    return {
        t
        for t in asyncio.all_tasks()
        if not t.done() and t.get_name().startswith(_HUB_TASK_PREFIXES)
    }


async def test_every_long_lived_task_is_in_the_runtime_tree_and_stops_with_the_app(
    redis_url: str, callback: CallbackServer
) -> None:
    settings = Settings(
        host="127.0.0.1",
        port=free_port(),
        allow_private_callbacks=True,
        changelist_scan_seconds=30,
    )
    runner, app = await start_hub(settings, redis_url)
    try:
        runtime = app[RUNTIME]
        async with aiohttp.ClientSession() as session:
            from tests.conftest import Hub

            hub = Hub(settings.public_url, app, settings, session)
            await subscribe(hub, callback)
            await hub.publish("t", notification(changes(2)))
            await wait_for(lambda: len(callback.ids) >= 2)
        names = runtime.tasks.names()
        for expected in (
            "hub/background/redis-health",
            "hub/background/retention",
            "hub/background/page-scan",
            "hub/ownership/heartbeat",
            "hub/ownership/ownership",
            "hub/ownership/subscription-changes",
            f"hub/delivery/workers/deliver:{callback.url}",
        ):
            assert expected in names, names
        # The feed follows by tail notice: no task of its own (by XREAD: "hub/feeds/feed:t").
        assert runtime.feeds.following("t") and "hub/feeds/feed:t" not in names
        # Nothing long-lived of the hub runs outside the tree.
        outside = _hub_tasks() - set(runtime.tasks.running())
        assert not outside, outside
    finally:
        await runner.cleanup()
    assert len(runtime.tasks) == 0
    assert runtime.tasks.stopping.is_set()
    assert _hub_tasks() == set()


async def test_shutdown_closes_in_dependency_order(
    redis_url: str, callback: CallbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(host="127.0.0.1", port=free_port(), allow_private_callbacks=True)
    runner, app = await start_hub(settings, redis_url)
    runtime = app[RUNTIME]
    closed: list[str] = []
    parts: dict[str, Any] = {
        "background": runtime.background,
        "ownership": runtime.ownership,
        "parser": runtime.parser,
        "delivery": runtime.delivery,
        "feeds": runtime.feeds,
        # Before the clients: a task left behind would open a new connection after them.
        "tasks": runtime.tasks,
        "client": runtime.client,
        "store": runtime.store,
        "connections": runtime.connections,
    }
    for name, part in parts.items():
        method = "stop" if name in ("background", "tasks") else "close"
        original = getattr(part, method)

        async def recorded(_name: str = name, _original: Any = original) -> None:
            closed.append(_name)
            await _original()

        monkeypatch.setattr(part, method, recorded)
    await runner.cleanup()
    assert list(dict.fromkeys(closed)) == list(parts)


async def test_a_close_that_fails_leaves_the_others_closing(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The outgoing client's close failing must not leave the Redis connections open: each
    step is logged and the next runs."""
    sockets = open_sockets()
    settings = Settings(host="127.0.0.1", port=free_port())
    runner, app = await start_hub(settings, redis_url)
    runtime = app[RUNTIME]
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{settings.public_url}/topics/t",
            data=notification(changes(1)),
            headers={"Content-Type": "application/xml"},
        ) as resp:
            assert resp.status == 202, await resp.text()
    assert open_sockets() > sockets  # the hub's Redis connections, at least

    async def failing() -> None:
        raise OSError("connection reset while closing")

    monkeypatch.setattr(runtime.client, "close", failing)
    with caplog.at_level(logging.WARNING, logger="hub.live.runtime"):
        await runner.cleanup()
    assert any("closing client failed" in r.getMessage() for r in caplog.records)
    await sockets_back(sockets, timeout=5)
