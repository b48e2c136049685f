"""A kept-alive lean connection between publishes (a cut in the publish path's CPU): reading
is paused only when bytes arrive while a publish is stored, and the keep-alive deadline's
timer is re-armed when it fires, not made anew per publish; the deadlines and the order of
requests are what they were.

Raw sockets on the in-process hub; which path served a publish is told by a spy on the lean
path, and a publish's append can be held (both lean ways: in a task or without one).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from hub.store import scripts
from hub.store.script_pipe import ScriptPipe
from hub.web.app import _GUARD
from hub.web.lean_connection import LeanConnection
from tests.conftest import Hub
from tests.hub.test_lean_publish import Conn, LeanSpy, lean_spy, request, stored
from tests.support import TIME_SCALE, changes, notification, wait_for
from tests.watchdog import Watchdog


def _keepalive() -> float:
    """Taken when used: the load factor is the test's own, not the one at import."""
    return 1.0 * TIME_SCALE


__all__ = ["lean_spy"]  # the fixture


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"keepalive_timeout_seconds": _keepalive(), "header_timeout_seconds": 30}


class Spy:
    """The lean path's publishes: their topics in order, and a gate each waits at."""

    def __init__(self) -> None:
        self.served: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.held = 0


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch, lean_spy: LeanSpy) -> Spy:
    """Holds each publish's append (both lean ways call ``ScriptPipe.call_script``) at the
    gate: a slow store."""
    seen = Spy()
    seen.served = lean_spy.served
    real = ScriptPipe.call_script
    holding: set[asyncio.Task[None]] = set()

    def call_script(pipe: ScriptPipe, script: Any, *args: Any, **kwargs: Any) -> Any:
        if script is not scripts.APPEND or seen.gate.is_set():
            return real(pipe, script, *args, **kwargs)
        outcome = asyncio.get_running_loop().create_future()
        seen.held += 1

        async def hold() -> None:
            try:
                await seen.gate.wait()
            finally:
                seen.held -= 1
            try:
                outcome.set_result(await real(pipe, script, *args, **kwargs))
            except Exception as exc:
                outcome.set_exception(exc)

        task = asyncio.ensure_future(hold())
        holding.add(task)
        task.add_done_callback(holding.discard)
        return outcome

    monkeypatch.setattr(ScriptPipe, "call_script", call_script)
    return seen


def _plain(i: int) -> bytes:
    return request(notification(changes(1, start=i)), token=None)


def _lean_connection(hub: Hub) -> LeanConnection:
    """The one lean connection the hub holds (a kept-alive one waits in the guard)."""
    (conn,) = [c for c in hub.app[_GUARD]._pending if isinstance(c, LeanConnection)]
    return conn


async def test_publishes_one_after_another_pause_no_reading_and_keep_one_timer(
    hub: Hub, spy: Spy
) -> None:
    conn = await Conn.open(hub)
    try:
        ids: list[str] = []
        timers = []
        lean: LeanConnection | None = None
        for i in range(5):
            if i == 2:  # the third is held before its store: reading goes on meanwhile
                spy.gate.clear()
                conn.writer.write(_plain(i))
                await wait_for(lambda: spy.held == 1)
                assert lean.transport is not None and lean.transport.is_reading()
                spy.gate.set()
                head, body = await conn.answer()
            else:
                head, body = await conn.ask(_plain(i))
            assert head.startswith(b"HTTP/1.1 202 "), head
            ids += orjson.loads(body)["ids"]
            lean = lean or _lean_connection(hub)
            assert lean is _lean_connection(hub)
            assert lean.transport is not None and lean.transport.is_reading()
            timers.append(hub.app[_GUARD]._pending[lean])
        assert spy.served == ["t"] * 5
        # One keep-alive timer for all five (a new one per publish before).
        assert all(t is timers[0] for t in timers), timers
        assert await stored(hub, "t") == ids
    finally:
        conn.close()


async def test_a_request_sent_while_a_publish_is_stored_waits_and_is_answered_next(
    hub: Hub, spy: Spy
) -> None:
    conn = await Conn.open(hub)
    try:
        async with Watchdog() as dog:
            head, body = await conn.ask(_plain(0))  # the connection is kept alive
            assert head.startswith(b"HTTP/1.1 202 ")
            ids: list[str] = orjson.loads(body)["ids"]
            lean = _lean_connection(hub)
            assert lean.transport is not None
            for second, served in (
                (_plain(2), ["t", "t", "t"]),  # another publish: lean as well
                (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", ["t", "t", "t", "t"]),
            ):
                spy.gate.clear()
                conn.writer.write(_plain(1))
                await wait_for(lambda: spy.held == 1)
                conn.writer.write(second)
                # Its bytes are kept, and reading paused until the first is answered.
                await wait_for(lambda: not lean.transport.is_reading())  # type: ignore[union-attr]
                assert spy.held == 1
                spy.gate.set()
                first_head, first_body = await conn.answer()
                second_head, second_body = await conn.answer()
                assert first_head.startswith(b"HTTP/1.1 202 "), first_head
                assert second_head.startswith((b"HTTP/1.1 202 ", b"HTTP/1.1 200 ")), second_head
                assert spy.served == served
                ids += orjson.loads(first_body)["ids"]  # in the order sent
                ids += orjson.loads(second_body).get("ids", [])
            # The GET went to aiohttp, which serves the connection from then on.
            head, body = await conn.ask(_plain(3))
            assert head.startswith(b"HTTP/1.1 202 ") and spy.served == ["t"] * 4
            assert await stored(hub, "t") == [*ids, *orjson.loads(body)["ids"]]
        await dog.sockets_back(slack=10)
    finally:
        conn.close()


async def test_keep_alive_deadline_counts_from_the_last_answer(hub: Hub, spy: Spy) -> None:
    conn = await Conn.open(hub)
    try:
        # Publishes 0.4 keep-alives apart for 3 keep-alives: the connection stays open
        # (the timer armed at the first fires early and waits on).
        started = time.monotonic()
        i = 0
        while time.monotonic() - started < 3 * _keepalive():
            head, _ = await conn.ask(_plain(i))
            assert head.startswith(b"HTTP/1.1 202 "), (i, head)
            i += 1
            await asyncio.sleep(0.4 * _keepalive())
        head, _ = await conn.ask(_plain(i))
        assert head.startswith(b"HTTP/1.1 202 ")
        last = time.monotonic()
        assert spy.served == ["t"] * (i + 1)
        # Then idle: closed one keep-alive after the last answer.
        assert await conn.closed()
        assert time.monotonic() - last >= 0.9 * _keepalive()
    finally:
        conn.close()
    assert not [c for c in hub.app[_GUARD]._pending if isinstance(c, LeanConnection)]
    assert not hub.app[_GUARD]._idle


async def test_a_handed_over_connection_keeps_the_keep_alive_deadline_it_had(
    hub: Hub, spy: Spy
) -> None:
    conn = await Conn.open(hub)
    try:
        head, _ = await conn.ask(_plain(0))
        assert head.startswith(b"HTTP/1.1 202 ")
        await asyncio.sleep(0.6 * _keepalive())
        head, _ = await conn.ask(_plain(1))  # the first timer is now early
        last = time.monotonic()
        # A head longer than the lean paths wait for, unfinished: handed to aiohttp with
        # the keep-alive deadline from the last answer (not the first timer's), which
        # closes it.
        conn.writer.write(b"GET /healthz HTTP/1.1\r\n" + b"X-Padding: %s\r\n" % (b"x" * 5000) * 2)
        assert await conn.closed()
        took = time.monotonic() - last
        assert 0.9 * _keepalive() <= took, took
        assert spy.served == ["t", "t"]
    finally:
        conn.close()


async def test_a_client_that_stops_sending_during_the_store_gets_its_answer_then_the_close(
    hub: Hub, spy: Spy
) -> None:
    for second in (b"", _plain(1)):  # the end alone, and after a pipelined publish
        conn = await Conn.open(hub)
        try:
            spy.gate.clear()
            served = len(spy.served)
            conn.writer.write(_plain(0))
            await wait_for(lambda: spy.held == 1)
            conn.writer.write(second)
            conn.writer.write_eof()
            spy.gate.set()
            async with asyncio.timeout(10 * TIME_SCALE):
                received = await conn.reader.read()
            answers = received.count(b"HTTP/1.1 202 ")
            # Each publish the lean path took was answered before the close.
            assert answers == len(spy.served) - served >= 1, (second[:20], received)
            assert received.startswith(b"HTTP/1.1 202 "), received
        finally:
            conn.close()
    await wait_for(lambda: spy.held == 0)
    assert len(await stored(hub, "t")) == len(spy.served)
