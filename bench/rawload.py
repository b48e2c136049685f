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
        self.buffer += data
        while True:
            end = self.buffer.find(_HEADER_END)
            if end < 0:
                return
            head = self.buffer[:end].lower()
            at = head.find(_LENGTH)
            length = 0
            if at >= 0:
                stop = head.find(b"\r\n", at + 2)
                length = int(head[at + len(_LENGTH) : stop if stop >= 0 else None])
            elif b"transfer-encoding" in head:
                self.run.failures.append("chunked answers are not supported")
                self._finish()
                return
            total = end + 4 + length
            if len(self.buffer) < total:
                return
            status = int(self.buffer[9:12])
            self.buffer = self.buffer[total:]
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
