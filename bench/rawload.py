"""A lean HTTP/1.1 load generator: pre-built requests on keep-alive connections.

aiohttp's client costs about as much CPU per request as the server it measures; on a
2-core machine that leaves the hub with one core at most, which hides what a second hub
process could add. This one writes ready-made request bytes from an ``asyncio.Protocol``
and reads only the status line and ``Content-Length`` of each answer, so the load generator
takes a fraction of a core. Used for the single-change publish figure of
``bench/hub.py --workers`` (both for the hub and for the bare baseline).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import cast

_HEADER_END = b"\r\n\r\n"
_LENGTH = b"\r\ncontent-length:"


def post_request(host: str, port: int, path: str, body: bytes, content_type: str) -> bytes:
    """The bytes of one keep-alive ``POST``."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


def take_answers(buffer: bytes) -> tuple[list[int], bytes]:
    """The statuses of the complete answers at the start of ``buffer``, and what follows
    them. Reads only each status line and ``Content-Length``; ValueError on a chunked
    answer (the servers measured here send none)."""
    statuses: list[int] = []
    while True:
        end = buffer.find(_HEADER_END)
        if end < 0:
            return statuses, buffer
        head = buffer[:end].lower()
        at = head.find(_LENGTH)
        length = 0
        if at >= 0:
            stop = head.find(b"\r\n", at + 2)
            length = int(head[at + len(_LENGTH) : stop if stop >= 0 else None])
        elif b"transfer-encoding" in head:
            raise ValueError("chunked answers are not supported")
        total = end + 4 + length
        if len(buffer) < total:
            return statuses, buffer
        statuses.append(int(buffer[9:12]))
        buffer = buffer[total:]


class _Connection(asyncio.Protocol):
    """Sends the next request as soon as the previous answer is complete."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._send()

    def _send(self) -> None:
        run = self.run
        if time.perf_counter() >= run.deadline or run.failures:
            self._finish()
            return
        assert self.transport is not None
        self.transport.write(run.requests[run.sent % len(run.requests)])
        run.sent += 1

    def _finish(self) -> None:
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    def data_received(self, data: bytes) -> None:
        try:
            statuses, self.buffer = take_answers(self.buffer + data)
        except ValueError as exc:
            self.run.failures.append(str(exc))
            self._finish()
            return
        for status in statuses:
            if status in self.run.ok:
                self.run.done += 1
            else:
                self.run.failures.append(f"HTTP {status}")
            self._send()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if not self.run.closed.done():
            self.run.open -= 1
            if self.run.open == 0:
                self.run.closed.set_result(None)


class _Run:
    def __init__(self, requests: list[bytes], seconds: float, ok: tuple[int, ...]) -> None:
        self.requests = requests
        self.deadline = time.perf_counter() + seconds
        self.ok = ok
        self.sent = 0
        self.done = 0
        self.failures: list[str] = []
        self.open = 0
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()


async def post_for(
    host: str,
    port: int,
    requests: list[bytes],
    seconds: float,
    concurrency: int,
    ok: tuple[int, ...] = (202, 204),
) -> float:
    """Send ``requests`` round-robin on ``concurrency`` connections for ``seconds``;
    completed requests per second. Raises RuntimeError on any non-``ok`` answer."""
    loop = asyncio.get_running_loop()
    start = time.perf_counter()
    run = _Run(requests, seconds, ok)
    run.open = concurrency
    for _ in range(concurrency):
        await loop.create_connection(lambda: _Connection(run), host, port)
    await asyncio.wait_for(run.closed, seconds + 30)
    elapsed = time.perf_counter() - start
    if run.failures:
        raise RuntimeError(f"raw publishes to {host}:{port} failed: {run.failures[:5]}")
    return run.done / elapsed


class _Paced(asyncio.Protocol):
    """A kept-alive connection of :func:`post_paced`: one request at a time."""

    def __init__(self) -> None:
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.answer: asyncio.Future[int] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            statuses, self.buffer = take_answers(self.buffer + data)
        except ValueError as exc:
            self._end(exc)
            return
        if statuses and self.answer is not None and not self.answer.done():
            self.answer.set_result(statuses[0])

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._end(ConnectionError(f"the server closed the connection ({exc or 'EOF'})"))

    def _end(self, exc: Exception) -> None:
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(exc)


async def post_paced(
    host: str,
    port: int,
    path: str,
    body_at: Callable[[int, int], bytes],
    interval: float,
    seconds: float,
    ok: tuple[int, ...] = (202,),
) -> int:
    """Every ``interval`` s for ``seconds``, POST ``body_at(k, stamp)`` (``application/xml``),
    ``stamp`` being ``perf_counter_ns()`` taken right before the body is built and written,
    as ``bench/hub.py``'s bare fan-out stamps its POSTs: a latency measured from it is the
    server's and the network's, not an HTTP client's request building (aiohttp's took
    ~0.4-0.6 ms here). Kept-alive connections are opened before the first tick, and one
    more whenever all are awaiting answers. Returns the POSTs sent; RuntimeError on any
    answer not in ``ok``."""
    loop = asyncio.get_running_loop()
    idle: list[_Paced] = []
    opened: list[_Paced] = []
    failures: list[str] = []

    async def connect() -> _Paced:
        _, conn = await asyncio.wait_for(loop.create_connection(_Paced, host, port), 10)
        opened.append(conn)
        return conn

    async def one(k: int) -> None:
        conn = idle.pop() if idle else await connect()
        assert conn.transport is not None
        conn.answer = loop.create_future()
        stamp = time.perf_counter_ns()
        body = body_at(k, stamp)
        conn.transport.write(post_request(host, port, path, body, "application/xml"))
        status = await asyncio.wait_for(conn.answer, 30)
        if status not in ok:
            failures.append(f"HTTP {status}")
        idle.append(conn)

    try:
        idle.extend([await connect(), await connect()])
        ticks = await run_paced(one, interval, seconds)
    finally:
        for conn in opened:
            if conn.transport is not None:
                conn.transport.close()
    if failures:
        raise RuntimeError(f"paced publishes to {host}:{port}{path} failed: {failures[:5]}")
    return ticks


async def run_paced(
    one: Callable[[int], Awaitable[None]], interval: float, seconds: float, limit: float = 60
) -> int:
    """Start ``one(k)`` every ``interval`` s for ``seconds`` (on schedule, not after the
    previous one ends), then wait for all, ``limit`` s at most; the ticks run."""
    ticks = round(seconds / interval)
    tasks: list[asyncio.Task[None]] = []
    try:
        start = time.perf_counter()
        for k in range(ticks):
            delay = start + k * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(k)))
        await asyncio.wait_for(asyncio.gather(*tasks), limit)
    finally:
        for task in tasks:
            task.cancel()
    return ticks
