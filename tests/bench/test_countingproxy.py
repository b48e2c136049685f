"""``bench/countingproxy.py``: a slow pid lookup (a scan of every process's ``/proc/PID/fd``)
must not hold up the bytes the proxy forwards, its own connection's or anybody else's."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest

from bench import countingproxy
from tests.support import TIME_SCALE, free_port, wait_for


#: How long the slow lookup holds its thread unless released (the test releases it).
def _stall() -> float:
    """Taken when used: the load factor is the test's own, not the one at import."""
    return 5.0 * TIME_SCALE


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


async def test_forwarding_goes_on_while_a_pid_lookup_is_slow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(countingproxy, "_connections", [], raising=False)
    upstream = await asyncio.start_server(_echo, "127.0.0.1", 0)
    target = upstream.sockets[0].getsockname()[1]
    listen = free_port()
    proxy = await countingproxy.forwarder("t", listen, target)
    streams: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
    gate = threading.Event()
    try:
        ra, wa = await asyncio.open_connection("127.0.0.1", listen)
        streams.append((ra, wa))
        wa.write(b"a")
        assert await asyncio.wait_for(ra.readexactly(1), 10 * TIME_SCALE) == b"a"

        real = countingproxy.client_pid
        stalled: list[int] = []

        def slow(client_port: int, server_port: int) -> int:
            stalled.append(client_port)
            gate.wait(_stall())  # a /proc scan on a very busy machine
            return real(client_port, server_port)

        monkeypatch.setattr(countingproxy, "client_pid", slow)
        began = time.monotonic()
        rb, wb = await asyncio.open_connection("127.0.0.1", listen)
        streams.append((rb, wb))
        await wait_for(lambda: bool(stalled))  # B's lookup is under way
        wb.write(b"bb")
        wa.write(b"aa")
        assert await asyncio.wait_for(rb.readexactly(2), 10 * TIME_SCALE) == b"bb"
        assert await asyncio.wait_for(ra.readexactly(2), 10 * TIME_SCALE) == b"aa"
        took = time.monotonic() - began
        assert not gate.is_set()
        # Both echoes came back while B's lookup was still stalled (on the event loop
        # they would have waited the whole stall).
        assert took < _stall() / 2, f"forwarding waited {took:.2f} s for a pid lookup"

        gate.set()
        counts = await countingproxy.snapshot()
        # Both connections are this process's: 3 + 2 bytes each way.
        assert counts == {f"t {os.getpid()}": [5, 5]}
    finally:
        gate.set()
        for reader, writer in streams:  # end each relay: EOF travels there and back
            writer.write_eof()
            await asyncio.wait_for(reader.read(), 10 * TIME_SCALE)
            writer.close()
        proxy.close()
        upstream.close()
        await proxy.wait_closed()
        await upstream.wait_closed()
