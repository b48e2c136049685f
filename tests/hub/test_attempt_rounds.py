"""A round of the attempt log waits for the deliveries in flight (bench/hub.py figure 4).

Written 50 ms after a publish's answers, a round (~1 ms of Redis for 100 attempts) fell, at
20 publishes/s, in the middle of the next publish's append and fan-out. Now it also waits,
at most ``AttemptWriter.patience`` seconds, until no delivery POST is in flight, and goes
out in script calls of bounded size. Against a real hub, Redis and callbacks; delivery
order and at-least-once are checked under it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from redis.exceptions import ConnectionError as RedisConnectionError

from hub.live.http_client import _Slots
from hub.store.attempts import CALL_ATTEMPTS, Attempt
from hub.web.app import RUNTIME
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_subscription_record import record
from tests.hub.test_websub import subscribe
from tests.support import TIME_SCALE, changes, notification, wait_for


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"admin_token": "adm"}


class HeldCallback(CallbackServer):
    """Takes each delivery in, then holds its answer until :attr:`gate` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.arrived = 0

    async def _deliver(self, request: web.Request) -> web.Response:
        self.arrived += 1
        await self.gate.wait()
        return await super()._deliver(request)


@pytest.fixture
async def pair(hub: Hub) -> AsyncIterator[tuple[CallbackServer, HeldCallback]]:
    """A fast callback and a held one, both subscribed to ``t``."""
    fast, held = CallbackServer(), HeldCallback()
    await fast.start()
    await held.start()
    await subscribe(hub, fast)
    await subscribe(hub, held)
    yield fast, held
    held.gate.set()
    await fast.stop()
    await held.stop()


async def publish(hub: Hub, n: int, start: int) -> list[str]:
    body = await (await hub.publish("t", notification(changes(n, start=start)))).json()
    return list(body["ids"])


async def test_a_round_waits_until_the_deliveries_in_flight_are_answered(
    hub: Hub, pair: tuple[CallbackServer, HeldCallback]
) -> None:
    fast, held = pair
    delivery = hub.app[RUNTIME].delivery
    writer, slots = delivery.attempts, delivery.client._delivery_slots
    writer.patience = 60.0  # its bound is the next test's: here only the wait counts
    rounds = writer.rounds
    ids: list[str] = []
    for k in range(3):  # the held callback keeps the first in flight, the rest wait
        ids += await publish(hub, 2, 2 * k)
        await wait_for(lambda sent=list(ids): fast.ids == sent)
    size = delivery.settings.delivery_concurrency
    # The fast callback has the last POST when its answer is still on the way back.
    await wait_for(lambda: slots.free == size - 1)
    assert held.arrived == 1
    # The fast callback's three attempts are queued; the round waits for the held answer
    # (before, it went out once its 50 ms were up).
    await wait_for(lambda: writer.rounds > rounds or getattr(slots, "_all_free", None) is not None)
    assert writer.rounds == rounds
    assert (await record(hub, "t", fast.url))["attempts"] == []

    held.gate.set()
    await wait_for(lambda: held.ids == ids)  # in order, each once
    assert fast.ids == ids
    await wait_for(lambda: writer.rounds > rounds)
    fast_log = (await record(hub, "t", fast.url))["attempts"]
    assert [a["status"] for a in fast_log] == [204, 204, 204]
    assert [a["first_event_id"] for a in reversed(fast_log)] == ids[::2]

    async def held_logged() -> bool:
        log = (await record(hub, "t", held.url))["attempts"]
        return [a["first_event_id"] for a in reversed(log)][:1] == ids[:1]

    await wait_for(held_logged)


async def test_a_round_waits_no_longer_than_its_patience(
    hub: Hub, pair: tuple[CallbackServer, HeldCallback]
) -> None:
    fast, held = pair
    delivery = hub.app[RUNTIME].delivery
    delivery.attempts.patience = 0.2
    slots = delivery.client._delivery_slots
    ids = await publish(hub, 1, 0)
    await wait_for(lambda: fast.ids == ids and held.arrived == 1)

    async def fast_logged() -> bool:
        return len((await record(hub, "t", fast.url))["attempts"]) == 1

    await wait_for(fast_logged, timeout=5.0)
    size = delivery.settings.delivery_concurrency
    await wait_for(lambda: slots.free == size - 1)
    assert held.arrived == 1 and not held.ids


async def test_all_free_returns_when_the_last_slot_comes_back_or_at_its_timeout() -> None:
    slots = _Slots(3)
    await asyncio.wait_for(slots.all_free(60.0), 1.0 * TIME_SCALE)  # nothing taken
    assert slots.try_take() and slots.try_take()
    waiting = asyncio.ensure_future(slots.all_free(60.0))
    await asyncio.sleep(0)
    slots.give()
    await asyncio.sleep(0)
    assert not waiting.done()
    slots.give()
    await asyncio.wait_for(waiting, 1.0 * TIME_SCALE)
    assert slots.free == 3 and slots._all_free is None
    # Bounded: a slot never given back ends the wait at its timeout, and it stays taken.
    assert slots.try_take()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(slots.all_free(0.05), 5.0 * TIME_SCALE)
    assert loop.time() - started >= 0.04 and slots.free == 2
    # A slot handed to a waiting taker is not "free": all_free keeps waiting for it.
    assert slots.try_take() and slots.try_take() and not slots.try_take()
    taker = asyncio.ensure_future(slots.take())
    waiting = asyncio.ensure_future(slots.all_free(60.0))
    await asyncio.sleep(0)
    slots.give()  # to the taker
    await taker
    assert not waiting.done()
    for _ in range(3):
        slots.give()
    await asyncio.wait_for(waiting, 1.0 * TIME_SCALE)


async def test_a_large_round_goes_out_in_bounded_calls_and_a_failed_one_is_written_again(
    hub: Hub,
) -> None:
    servers = [await CallbackServer().start() for _ in range(6)]
    try:
        for server in servers:
            await subscribe(hub, server, topic="chunky")
        writer = hub.app[RUNTIME].delivery.attempts
        keep, write, calls = writer.store.keep, writer.store.write, []

        async def injected(topic: str, logs: dict[str, list[Attempt]]) -> None:
            """The real write; the second call fails as if Redis went away."""
            calls.append(sum(map(len, logs.values())))
            if len(calls) == 2:
                raise RedisConnectionError("injected: Redis went away mid-round")
            await write(topic, logs)

        writer.store.write = injected  # type: ignore[method-assign]
        for i, server in enumerate(servers):
            for k in range(keep):
                writer.record("chunky", server.url, Attempt(k, 204, 1.0, None, f"{k}-{i}", "", 1))
        await wait_for(lambda: not writer._logs and writer._task is None)
        # 300 attempts: 250 (five logs) and 50 in a second call, which failed and was
        # written again alone; nothing of the first call twice.
        assert calls == [5 * keep, keep, keep] and 5 * keep <= CALL_ATTEMPTS < 6 * keep
        for i, server in enumerate(servers):
            logged, last = await writer.store.read("chunky", server.url)
            assert [a.first_event_id for a in logged] == [f"{k}-{i}" for k in range(keep)][::-1]
            assert last is not None and last.event_id == ""
    finally:
        for server in servers:
            await server.stop()
