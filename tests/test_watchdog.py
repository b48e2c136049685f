"""The watchdog itself: it must see what it is there to see, or every hostile test lies."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest
import redis.asyncio

from tests.support import TIME_SCALE
from tests.watchdog import Watchdog, open_sockets


async def test_a_loop_that_spins_is_a_stall() -> None:
    with pytest.raises(AssertionError, match="busy for"):
        async with Watchdog():
            await asyncio.sleep(0.03)
            end = time.thread_time() + 0.2
            while time.thread_time() < end:
                pass
            await asyncio.sleep(0.03)


async def test_a_loop_that_keeps_turning_is_not() -> None:
    async with Watchdog() as dog:
        for _ in range(20):
            await asyncio.sleep(0.005)
    assert dog.max_gap > 0


async def test_error_records_are_a_crash_loop() -> None:
    with pytest.raises(AssertionError, match="ERROR log records"):
        async with Watchdog(max_errors=2):
            for _ in range(3):
                logging.getLogger("hub.test").error("worker died")


async def test_a_socket_left_open_is_seen() -> None:
    async with Watchdog() as dog:
        sock = socket.socket()
    assert open_sockets() == dog.baseline_sockets + 1
    with pytest.raises(AssertionError, match="sockets open"):
        await dog.sockets_back(timeout=0.2)
    sock.close()
    await dog.sockets_back(timeout=1)


async def test_connections_a_redis_pool_opened_are_no_leak(redis_url: str) -> None:
    """A pool that grew during the watch keeps its connections for the next command: the
    hostile tests failed on that once the machine was slow enough for commands to overlap.
    A plain socket left open beside it is still seen."""

    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        await client.ping()
        async with Watchdog() as dog:
            # Overlapping commands: the pool opens a connection for each.
            await asyncio.gather(*(client.blpop(["nothing"], timeout=0.05) for _ in range(4)))
            sock = socket.socket()
        pool = client.connection_pool
        assert len(pool._available_connections) + len(pool._in_use_connections) >= 4
        with pytest.raises(AssertionError, match="sockets open"):
            await dog.sockets_back(timeout=0.2)
        sock.close()
        await dog.sockets_back(timeout=1)
    finally:
        await client.aclose()


def test_pytest_timeouts_grow_with_the_load_factor(request: pytest.FixtureRequest) -> None:
    """pytest-timeout's limit is the load's factor times the configured 60 s, as every
    other bound in the suite: a test cut mid-write by SIGALRM logged its traceback from
    inside the hub's protocol on a machine running two suites."""
    marker = request.node.get_closest_marker("timeout")
    assert marker is not None and marker.args[0] == pytest.approx(60 * float(TIME_SCALE))


@pytest.mark.timeout(7)
def test_an_explicit_timeout_grows_too(request: pytest.FixtureRequest) -> None:
    marker = request.node.get_closest_marker("timeout")
    assert marker is not None and marker.args[0] == pytest.approx(7 * float(TIME_SCALE))
