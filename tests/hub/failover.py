"""Publishing through a Redis failover, and counting what was acknowledged but lost.

Two hubs share one Redis: ``plain`` answers a publish once the primary has it, ``waited``
once a replica has it too (``RSHUB_REDIS_WAIT_REPLICAS=1``). Each publishes to its own
topic from a few concurrent publishers that retry a 503 with the same Idempotency-Key (as
``publisher`` does). Each hub also follows the other's topic (a WebSocket, and a WebSub
subscription on ``waited``), so that its blocking reads, leases and subscription following
must come through the failover too, not only its publishes.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from hub.core.settings import Settings
from hub.store import keys
from tests.conftest import start_hub
from tests.hub.callback_server import CallbackServer
from tests.support import TIME_SCALE, free_port, notification, wait_for
from tests.watchdog import open_sockets, sockets_back

PUBLISHERS = 3
#: Publishes acknowledged by each hub before the kill, and again after the failover.
BEFORE, AFTER = 40, 20


@dataclass
class Side:
    """One hub, its topic, and what its publishers were told."""

    name: str
    topic: str
    url: str = ""
    runner: web.AppRunner | None = None
    #: (monotonic time, ids) of every 202.
    acked: list[tuple[float, list[str]]] = field(default_factory=list)
    #: 503 messages, by text (counted).
    refused: dict[str, int] = field(default_factory=dict)

    def acked_since(self, moment: float) -> int:
        return sum(1 for at, _ in self.acked if at >= moment)

    def ids(self) -> set[str]:
        return {i for _, ids in self.acked for i in ids}


@dataclass
class Figures:
    name: str
    acked: int
    lost: int
    #: The longest time between two 202s (or the kill and the next 202) after the kill.
    outage_seconds: float
    refused: dict[str, int]

    def line(self) -> str:
        refused = sum(self.refused.values())
        return (
            f"{self.name}: {self.acked} changes acknowledged (202), {self.lost} of them lost; "
            f"publishes refused (503) {refused} times; longest stretch without a 202 after "
            f"the kill {self.outage_seconds:.2f}s"
        )


async def _publish_loop(
    session: aiohttp.ClientSession, side: Side, worker: int, stop: asyncio.Event
) -> None:
    n = 0
    while not stop.is_set():
        key = f"{side.topic}-{worker}-{n}"
        body = notification([{"loc": f"http://example.org/{side.topic}/{worker}/{n}"}])
        while not stop.is_set():  # the same publish again, until it is acknowledged
            try:
                async with session.post(
                    f"{side.url}/topics/{side.topic}",
                    data=body,
                    headers={"Content-Type": "application/xml", "Idempotency-Key": key},
                    timeout=aiohttp.ClientTimeout(total=30 * TIME_SCALE),
                ) as resp:
                    answer = await resp.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                text = f"client error {exc!r}"
                side.refused[text] = side.refused.get(text, 0) + 1
                continue
            if resp.status == 202:
                side.acked.append((time.monotonic(), json.loads(answer)["ids"]))
                break
            assert resp.status == 503, (resp.status, answer)
            message = json.loads(answer)["error"]
            side.refused[message] = side.refused.get(message, 0) + 1
            await asyncio.sleep(0.02)  # a publisher's back-off, not a wait for a state
        n += 1


async def _follow(session: aiohttp.ClientSession, url: str, seen: list[str]) -> None:
    async with session.ws_connect(url, heartbeat=None) as ws:
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            seen += [event["loc"] for event in json.loads(msg.data)]


async def run_failover(
    redis_url: str,
    *,
    kill: Callable[[], int],
    await_failover: Callable[[int], float],
    stored_ids: Callable[[str], Awaitable[set[str]]],
    topics: tuple[str, str] = ("plain", "waited"),
    wait_seconds: float = 1.0,
    extra: dict[str, Any] | None = None,
) -> tuple[float, list[Figures], list[str]]:
    """Publish through both hubs, ``kill`` the primary mid-way, go on until each hub has
    acknowledged :data:`AFTER` more publishes after ``await_failover``; the failover's
    seconds, each hub's figures, and every 503 message seen."""
    plain, waited = Side("without WAIT", topics[0]), Side("with WAIT 1", topics[1])
    sockets = open_sockets()
    callback = await CallbackServer().start()
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    seen: dict[str, list[str]] = {plain.topic: [], waited.topic: []}
    try:
        for side, replicas in ((plain, 0), (waited, 1)):
            settings = Settings(
                host="127.0.0.1",
                port=free_port(),
                redis_url=redis_url,
                redis_wait_replicas=replicas,
                redis_wait_seconds=wait_seconds,
                allow_private_callbacks=True,
                ownership_lease_seconds=1.0,
                **(extra or {}),
            )
            side.runner, _app = await start_hub(settings, redis_url)
            side.url = settings.public_url
        async with aiohttp.ClientSession() as session:
            # Each hub follows the other's topic: its feed reads with XREAD BLOCK.
            for side, other in ((plain, waited), (waited, plain)):
                url = f"{side.url.replace('http', 'ws')}/topics/{other.topic}/ws"
                tasks.append(asyncio.create_task(_follow(session, url, seen[other.topic])))
            form = {
                "hub.mode": "subscribe",
                "hub.topic": f"{waited.url}/topics/{plain.topic}",
                "hub.callback": callback.url,
            }
            async with session.post(f"{waited.url}/", data=form) as resp:
                assert resp.status == 202, await resp.text()
            await wait_for(lambda: callback.verifications, timeout=10)
            for side in (plain, waited):
                for worker in range(PUBLISHERS):
                    tasks.append(asyncio.create_task(_publish_loop(session, side, worker, stop)))
            await wait_for(lambda: min(len(plain.acked), len(waited.acked)) >= BEFORE, 20)
            await wait_for(lambda: callback.locs and all(seen.values()), 10)

            killed_at = time.monotonic()
            old = kill()
            failover = await asyncio.to_thread(await_failover, old)
            promoted_at = time.monotonic()
            await wait_for(
                lambda: (
                    min(plain.acked_since(promoted_at), waited.acked_since(promoted_at)) >= AFTER
                ),
                timeout=30,
            )
            stop.set()
            await asyncio.wait_for(
                asyncio.gather(*tasks[2:]), timeout=35 * TIME_SCALE
            )  # the publishers
            last = {side.topic: f"http://example.org/{side.topic}/last" for side in (plain, waited)}
            for side in (plain, waited):
                async with session.post(
                    f"{side.url}/topics/{side.topic}",
                    data=notification([{"loc": last[side.topic]}]),
                    headers={"Content-Type": "application/xml"},
                ) as resp:
                    assert resp.status == 202, await resp.text()
            # The other hub's live stream and WebSub delivery came through the failover.
            await wait_for(lambda: all(last[t] in seen[t] for t in last), timeout=20)
            await wait_for(lambda: last[plain.topic] in callback.locs, timeout=30)

        figures = []
        for side in (plain, waited):
            stored = await stored_ids(keys.events(side.topic))
            times = [killed_at, *sorted(at for at, _ in side.acked if at >= killed_at)]
            figures.append(
                Figures(
                    side.name,
                    acked=len(side.ids()),
                    lost=len(side.ids() - stored),
                    outage_seconds=max(b - a for a, b in itertools.pairwise(times)),
                    refused=side.refused,
                )
            )
        messages = sorted({m for side in (plain, waited) for m in side.refused})
        for side in (plain, waited):
            assert side.runner is not None
            await side.runner.cleanup()
            side.runner = None
        await callback.stop()
        callback._runner = None
        # Every client the hubs made (the Sentinel's included) is closed with them.
        await sockets_back(sockets, timeout=10)
        return failover, figures, messages
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for side in (plain, waited):
            if side.runner is not None:
                await side.runner.cleanup()
        await callback.stop()
