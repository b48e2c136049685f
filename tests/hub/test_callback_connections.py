"""The delivery client against scripted callback servers on real sockets, on both loops.

Each server reads whole requests and answers each with the next scripted reply (raw bytes),
so every framing a callback may use is exercised: Content-Length, chunked, bodiless
statuses, bodies ending at close, HTTP/1.0, interim 1xx answers, and broken answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

import pytest
import uvloop

from hub.core.exceptions import CallbackFailed
from hub.live.callback_connections import CallbackConnections

LOOPS = {"asyncio": None, "uvloop": uvloop.new_event_loop}


class Scripted(asyncio.Protocol):
    """Answers the n-th request with ``replies[n]``; ``None`` closes without answering."""

    def __init__(self, server: ScriptedServer) -> None:
        self.server = server
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.server.connections += 1

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = self.buffer[:end].decode("latin-1")
            length = next(
                int(line.split(":", 1)[1])
                for line in head.split("\r\n")
                if line.lower().startswith("content-length:")
            )
            if len(self.buffer) < end + 4 + length:
                return
            self.server.requests.append((head, self.buffer[end + 4 : end + 4 + length]))
            self.buffer = self.buffer[end + 4 + length :]
            reply = self.server.replies.pop(0)
            if reply is None:
                self.transport.close()
                return
            self.transport.write(reply)
            if self.server.close_after_reply:
                self.transport.close()


class ScriptedServer:
    def __init__(self, replies: list[bytes | None], close_after_reply: bool = False) -> None:
        self.replies = replies
        self.close_after_reply = close_after_reply
        self.requests: list[tuple[str, bytes]] = []
        self.connections = 0

    async def start(self) -> str:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: Scripted(self), "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/cb/1?x=1"


def on_both_loops(scenario: Callable[[], Awaitable[None]]) -> Callable[[str], None]:
    @pytest.mark.parametrize("loop", LOOPS)
    def test(loop: str) -> None:
        with asyncio.Runner(loop_factory=LOOPS[loop]) as runner:
            runner.run(asyncio.wait_for(scenario(), 10))

    test.__name__ = scenario.__name__
    test.__doc__ = scenario.__doc__
    return test


async def post_all(
    replies: list[bytes | None], count: int, **server: Any
) -> tuple[list[tuple[int, dict[str, str]] | Exception], ScriptedServer]:
    srv = ScriptedServer(replies, **server)
    url = await srv.start()
    pool = CallbackConnections(allow_private=True)
    results: list[tuple[int, dict[str, str]] | Exception] = []
    try:
        for i in range(count):
            try:
                results.append(await pool.post(url, b"<body %d/>" % i, {"X-Test": str(i)}, 5.0))
            except CallbackFailed as exc:
                results.append(exc)
            await asyncio.sleep(0)  # let a discarded body finish (bounded: data is local)
            for _ in range(100):
                if not pool._open or all(not c.reading_body for c in pool._open):
                    break
                await asyncio.sleep(0.001)
    finally:
        await pool.close()
        srv.server.close()
    return results, srv


OK_LENGTH = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
OK_CHUNKED = (
    b"HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n"
)
NO_CONTENT = b"HTTP/1.1 204 No Content\r\nRetry-After: 7\r\n\r\n"


@on_both_loops
async def test_keep_alive_reuses_one_connection_across_framings() -> None:
    results, srv = await post_all([OK_LENGTH, OK_CHUNKED, NO_CONTENT, OK_LENGTH], 4)
    assert [r[0] for r in results if isinstance(r, tuple)] == [200, 202, 204, 200]
    assert srv.connections == 1
    head, body = srv.requests[2]
    assert head.startswith("POST /cb/1?x=1 HTTP/1.1\r\nHost: 127.0.0.1:")
    assert "X-Test: 2" in head and body == b"<body 2/>"
    assert results[2] == (204, {"retry-after": "7"})


@on_both_loops
async def test_interim_answers_are_skipped() -> None:
    results, _ = await post_all([b"HTTP/1.1 100 Continue\r\n\r\n" + NO_CONTENT], 1)
    assert results == [(204, {"retry-after": "7"})]


@on_both_loops
async def test_answers_that_end_the_connection_are_not_reused() -> None:
    until_close = b"HTTP/1.1 200 OK\r\n\r\nbody until close"
    http10 = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    results, srv = await post_all([until_close, http10, closing, NO_CONTENT], 4)
    assert [r[0] for r in results if isinstance(r, tuple)] == [200, 200, 200, 204]
    assert srv.connections == 4


@on_both_loops
async def test_an_idle_connection_closed_by_the_callback_is_retried_once() -> None:
    # The server closes after each answer, as a callback with a short keep-alive would.
    results, srv = await post_all([NO_CONTENT, NO_CONTENT], 2, close_after_reply=True)
    assert [r[0] for r in results if isinstance(r, tuple)] == [204, 204]
    assert len(srv.requests) == 2


@on_both_loops
async def test_a_callback_that_closes_mid_request_fails_the_delivery() -> None:
    results, _ = await post_all([None], 1)
    assert isinstance(results[0], CallbackFailed)
    assert "closed before an answer" in str(results[0])


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (b"HTP/1.1 200 OK\r\n\r\n", "malformed status line"),
        (b"HTTP/1.1 2x0 OK\r\n\r\n", "malformed status code"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\n", "malformed Content-Length"),
        (b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", "response head longer"),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "switched protocols"),
    ],
)
def test_broken_answers_fail_with_a_reason(reply: bytes, message: str) -> None:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        results, _ = runner.run(asyncio.wait_for(post_all([reply], 1), 10))
    assert isinstance(results[0], CallbackFailed)
    assert message in str(results[0])


@on_both_loops
async def test_a_chunked_body_in_pieces_and_a_huge_body_to_skip() -> None:
    huge = b"HTTP/1.1 200 OK\r\nContent-Length: 3000000\r\n\r\n" + b"x" * 3_000_000
    results, srv = await post_all([OK_CHUNKED, huge, NO_CONTENT], 3)
    # the answer is complete at its head; a body too large to skip closes the connection
    assert [r[0] for r in results if isinstance(r, tuple)] == [202, 200, 204]
    assert srv.connections == 2


async def test_private_addresses_are_refused_unless_allowed() -> None:
    pool = CallbackConnections(allow_private=False)
    with pytest.raises(CallbackFailed, match=r"refusing to connect to 127\.0\.0\.1"):
        await pool.post("http://127.0.0.1:9/cb", b"", {}, 5.0)
    with pytest.raises(CallbackFailed, match="refusing to connect to ::1"):
        await pool.post("http://[::1]:9/cb", b"", {}, 5.0)
    await pool.close()


async def test_a_header_with_a_line_break_is_refused() -> None:
    pool = CallbackConnections(allow_private=True)
    with pytest.raises(CallbackFailed, match="line break"):
        await pool.post("http://127.0.0.1:9/cb", b"", {"X": "a\r\nInjected: 1"}, 5.0)
    await pool.close()


@on_both_loops
async def test_a_callback_that_never_answers_times_out() -> None:
    srv = ScriptedServer([b""])  # reads the request, writes nothing
    url = await srv.start()
    pool = CallbackConnections(allow_private=True)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(CallbackFailed, match=r"no answer within 0\.2 s"):
        await pool.post(url, b"<x/>", {}, 0.2)
    assert 0.2 <= loop.time() - started < 2.0
    assert not pool._idle.get(("http", "127.0.0.1", srv.server.sockets[0].getsockname()[1]))
    await pool.close()
    srv.server.close()


@on_both_loops
async def test_idle_connections_are_closed_after_idle_seconds() -> None:
    srv = ScriptedServer([NO_CONTENT])
    url = await srv.start()
    pool = CallbackConnections(allow_private=True, idle_seconds=0.3)
    try:
        assert (await pool.post(url, b"<x/>", {}, 5.0))[0] == 204
        for _ in range(100):  # the body-less answer ends at once: the connection is idle
            if pool.idle_count == 1:
                break
            await asyncio.sleep(0.01)
        assert pool.idle_count == 1 and len(pool._open) == 1
        for _ in range(300):  # closed by the sweep (twice a second) once 0.3 s idle
            if pool.idle_count == 0 and not pool._open:
                break
            await asyncio.sleep(0.01)
        assert pool.idle_count == 0 and not pool._open and not pool._idle
    finally:
        await pool.close()
        srv.server.close()


@on_both_loops
async def test_idle_connections_are_capped_in_all() -> None:
    servers = [ScriptedServer([NO_CONTENT]) for _ in range(3)]
    urls = [await s.start() for s in servers]
    pool = CallbackConnections(allow_private=True, max_idle=2)
    try:
        for url in urls:
            assert (await pool.post(url, b"<x/>", {}, 5.0))[0] == 204
            await asyncio.sleep(0)
        for _ in range(300):  # the third answer's connection is closed, not kept
            if len(pool._open) == 2:
                break
            await asyncio.sleep(0.01)
        assert pool.idle_count == 2 and len(pool._open) == 2
    finally:
        await pool.close()
        for s in servers:
            s.server.close()
