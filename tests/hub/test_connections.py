"""Connection hygiene with real sockets: header and body deadlines, and the connection cap."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.conftest import Hub
from tests.support import TIME_SCALE, changes, notification

HEADER_TIMEOUT = 0.5
BODY_TIMEOUT = 0.5


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {
        "header_timeout_seconds": HEADER_TIMEOUT,
        "body_timeout_seconds": BODY_TIMEOUT,
        "max_connections": 400,
    }


async def connect(hub: Hub) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(hub.settings.host, hub.settings.port)


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """Everything the hub sends until it closes the connection (fails after ``seconds``)."""
    return await asyncio.wait_for(reader.read(), seconds * TIME_SCALE)


def head(length: int) -> bytes:
    return (
        # The hub's own address: a hub without tokens refuses a publish under another name.
        "POST /topics/t HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/xml\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


async def test_incomplete_headers_are_cut_off(hub: Hub) -> None:
    reader, writer = await connect(hub)
    writer.write(b"POST /topics/t HTTP/1.1\r\nHost: hub\r\n")  # and never the blank line
    started = time.monotonic()
    assert await closed_within(reader, HEADER_TIMEOUT + 5) == b""
    assert time.monotonic() - started >= HEADER_TIMEOUT * 0.9
    writer.close()


async def test_a_silent_connection_is_cut_off(hub: Hub) -> None:
    reader, writer = await connect(hub)
    assert await closed_within(reader, HEADER_TIMEOUT + 5) == b""
    writer.close()


async def test_a_body_that_stops_arriving_is_408(hub: Hub) -> None:
    reader, writer = await connect(hub)
    writer.write(head(1000) + b"<")
    answer = await closed_within(reader, BODY_TIMEOUT + 5)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"RSHUB_BODY_TIMEOUT_SECONDS" in answer
    writer.close()


async def test_a_body_dripping_one_byte_at_a_time_is_408_not_accepted(hub: Hub) -> None:
    body = notification(changes(1))
    reader, writer = await connect(hub)
    writer.write(head(len(body)))
    answer = b""
    for byte in body:
        writer.write(bytes([byte]))
        try:
            answer = await asyncio.wait_for(reader.read(), 0.05)
            break
        except TimeoutError:
            continue
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert await hub.redis.exists("rshub:{t}:events") == 0
    writer.close()


class TestManyStalledBodies:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        # A generous header deadline: 300 connections at once must not race it on a busy box.
        return {"header_timeout_seconds": 30, "body_timeout_seconds": BODY_TIMEOUT}

    async def test_hundreds_of_stalled_bodies_are_all_closed(self, hub: Hub) -> None:
        """The reported attack, scaled down: each connection sends 1 byte of a 1,000-byte
        body (before: every one stayed open indefinitely)."""
        conns = [await connect(hub) for _ in range(300)]
        for _, writer in conns:
            writer.write(head(1000) + b"<")
        answers = await asyncio.gather(*(closed_within(r, BODY_TIMEOUT + 15) for r, _ in conns))
        assert [a[:12] for a in answers] == [b"HTTP/1.1 408"] * 300
        for _, writer in conns:
            writer.close()
        assert (await hub.session.get(hub.url + "/healthz")).status == 200


class TestConnectionCap:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"max_connections": 20, "header_timeout_seconds": 30}

    async def test_connections_over_the_cap_get_503_and_are_closed(self, hub: Hub) -> None:
        held = [await connect(hub) for _ in range(20)]
        try:
            reader, writer = await connect(hub)
            answer = await closed_within(reader, 5)
            assert answer.startswith(b"HTTP/1.1 503") and b"too many connections" in answer
            writer.close()
        finally:
            for _, w in held:
                w.close()

        async def healthy() -> bool:
            try:
                reader, writer = await connect(hub)
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: hub\r\nConnection: close\r\n\r\n")
                answer = await closed_within(reader, 5)
                writer.close()
                return answer.startswith(b"HTTP/1.1 200")
            except OSError:
                return False

        from tests.support import wait_for

        await wait_for(healthy)


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
async def test_the_cap_holds_in_rshub_serve_on_either_event_loop(tmp_path: Any, loop: str) -> None:
    from tests.support import HubProcess

    served = HubProcess(
        str(tmp_path),
        None,
        env={"RSHUB_MAX_CONNECTIONS": "5", "RSHUB_UVLOOP": str(loop == "uvloop").lower()},
    ).start()
    held = []
    try:
        for _ in range(5):
            held.append(await asyncio.open_connection("127.0.0.1", served.port))
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        answer = await closed_within(reader, 5)
        assert answer.startswith(b"HTTP/1.1 503") and b"too many connections" in answer
        writer.close()
        assert "Traceback" not in served.log()
    finally:
        for _, w in held:
            w.close()
        served.stop()
