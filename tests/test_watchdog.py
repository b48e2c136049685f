"""The watchdog itself: it must see what it is there to see, or every hostile test lies."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

import pytest

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
