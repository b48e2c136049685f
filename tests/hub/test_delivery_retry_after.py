"""A callback's ``Retry-After`` (RFC 9110 §10.2.3), both forms, against a real hub and a
real callback: the next delivery attempt waits for it, never longer than
``retry_max_seconds``, and no value the callback sends breaks its delivery worker."""

from __future__ import annotations

import itertools
import random
import string
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any

import pytest
from aiohttp import web

from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_websub import subscribe
from tests.support import TIME_SCALE, changes, notification, wait_for
from tests.watchdog import Watchdog


#: Scheduling slack on top of an expected delay (a busy machine wakes the worker late).
def _slack() -> float:
    """Taken when used: the load factor is the test's own, not the one at import."""
    return 0.5 * TIME_SCALE


def http_date(ahead: float) -> Callable[[], str]:
    """An IMF-fixdate ``ahead`` seconds from the moment the callback answers."""
    return lambda: formatdate(time.time() + ahead, usegmt=True)


@dataclass
class RefusingCallback(CallbackServer):
    """Refuses (``statuses``) with a ``Retry-After``, and notes when each attempt came."""

    #: The ``Retry-After`` to send with the refusals (called for each).
    retry_after: Callable[[], str] = lambda: "0"
    #: ``time.monotonic()`` of every delivery attempt, refused or not.
    attempts: list[float] = field(default_factory=list)

    async def _deliver(self, request: web.Request) -> web.Response:
        self.attempts.append(time.monotonic())
        if self.statuses and self.statuses[0] >= 300:
            self.refused += 1
            status = self.statuses.pop(0)
            return web.Response(status=status, headers={"Retry-After": self.retry_after()})
        return await super()._deliver(request)


@pytest.fixture
async def refusing() -> AsyncIterator[RefusingCallback]:
    server = RefusingCallback()
    await server.start()
    yield server
    await server.stop()


async def first_retry_gap(
    hub: Hub, cb: RefusingCallback, status: int, value: Callable[[], str]
) -> float:
    """Seconds between a delivery the callback refused with ``status`` and ``Retry-After:
    value()``, and the hub's next attempt (which it accepts)."""
    cb.statuses, cb.retry_after = [status], value
    await subscribe(hub, cb)
    await hub.publish("t", notification(changes(1)))
    await wait_for(lambda: len(cb.deliveries) >= 1, timeout=20)
    assert cb.refused == 1 and len(cb.attempts) == 2
    return cb.attempts[1] - cb.attempts[0]


class TestHonoured:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"retry_base_seconds": 0.05, "retry_max_seconds": 10.0}

    async def test_503_with_an_http_date_waits_until_that_date(
        self, hub: Hub, refusing: RefusingCallback
    ) -> None:
        # An HTTP-date has whole seconds: 3 s ahead, cut to the second, is 2 to 3 s away.
        gap = await first_retry_gap(hub, refusing, 503, http_date(3))
        assert 1.9 <= gap <= 3 + _slack(), gap  # main ignored the date: 0.025-0.05 s

    async def test_429_with_an_http_date_waits_until_that_date(
        self, hub: Hub, refusing: RefusingCallback
    ) -> None:
        gap = await first_retry_gap(hub, refusing, 429, http_date(3))
        assert 1.9 <= gap <= 3 + _slack(), gap

    async def test_503_with_delta_seconds_waits_that_long(
        self, hub: Hub, refusing: RefusingCallback
    ) -> None:
        gap = await first_retry_gap(hub, refusing, 503, lambda: "2")
        assert 1.95 <= gap <= 2 + _slack(), gap

    async def test_a_date_in_the_past_means_the_usual_back_off(
        self, hub: Hub, refusing: RefusingCallback
    ) -> None:
        gap = await first_retry_gap(hub, refusing, 503, http_date(-3600))
        assert gap <= 0.05 + _slack(), gap


class TestCapped:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"retry_base_seconds": 0.05, "retry_max_seconds": 1.5}

    async def test_a_far_http_date_is_cut_to_retry_max_seconds(
        self, hub: Hub, refusing: RefusingCallback
    ) -> None:
        gap = await first_retry_gap(hub, refusing, 503, http_date(3600))
        assert 1.45 <= gap <= 1.5 + _slack(), gap  # main: 0.025-0.05 s

    async def test_far_delta_seconds_are_cut_to_retry_max_seconds(
        self, hub: Hub, refusing: RefusingCallback
    ) -> None:
        gap = await first_retry_gap(hub, refusing, 429, lambda: "9" * 40)
        assert 1.45 <= gap <= 1.5 + _slack(), gap


def junk(rng: random.Random) -> str:
    """A ``Retry-After`` a broken or hostile callback might send (valid header bytes)."""
    now = time.time()
    kind = rng.randrange(8)
    if kind == 0:
        return formatdate(now + rng.uniform(-1e9, 1e9), usegmt=rng.random() < 0.5)
    if kind == 1:
        return str(rng.randrange(10 ** rng.randrange(1, 60)))
    if kind == 2:
        return rng.choice(["-1", "1.5", "1e9", "nan", "inf", "0x10", "+3", " ", "Sun,", "GMT"])
    if kind == 3:  # a date with fields out of range or missing
        day = rng.choice(["Mon", "Xyz", ""])
        return f"{day}, {rng.randrange(-5, 99)} Nov {rng.randrange(-10, 99999)} 99:99:99 GMT"
    if kind == 4:
        return "Sun Nov  6 08:49:37 " + str(rng.randrange(0, 10**8))
    alphabet = string.printable.strip() + " éü²٣"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 80)))


class TestFuzz:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"retry_base_seconds": 0.01, "retry_max_seconds": 0.2}

    async def test_junk_retry_after_never_breaks_or_stalls_delivery(
        self, hub: Hub, refusing: RefusingCallback
    ) -> None:
        await subscribe(hub, refusing)
        await hub.publish("t", notification(changes(1)))  # connections to Redis and back
        await wait_for(lambda: len(refusing.ids) == 1)
        rng = random.Random(20261124)
        refusals = 40
        refusing.statuses = [rng.choice([429, 503]) for _ in range(refusals)]
        refusing.retry_after = lambda: junk(rng)
        async with Watchdog() as dog:
            published = (await (await hub.publish("t", notification(changes(3)))).json())["ids"]
            await wait_for(lambda: len(refusing.ids) >= 4, timeout=30)
        await dog.sockets_back()
        assert refusing.ids[1:] == published and refusing.refused == refusals
        attempts = refusing.attempts[1:]
        gaps = [b - a for a, b in itertools.pairwise(attempts)]
        assert max(gaps) <= 0.2 + _slack(), max(gaps)  # every one capped
