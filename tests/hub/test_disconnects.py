"""A client that goes away is routine: one DEBUG line at most, never an ERROR traceback."""

from __future__ import annotations

import asyncio
import logging

import pytest

from hub.web.app import RUNTIME
from tests.conftest import Hub
from tests.support import changes, notification, wait_for


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.ERROR or r.exc_info
    ]


async def raw(hub: Hub, request: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(hub.settings.host, hub.settings.port)
    writer.write(request)
    await writer.drain()
    return reader, writer


def abort(writer: asyncio.StreamWriter) -> None:
    """Drop the connection without a goodbye (RST), as a crashed client does."""
    writer.transport.abort()


async def published(hub: Hub, n: int) -> None:
    for i in range(0, n, 1000):
        assert (await hub.publish("t", notification(changes(1000, start=i)))).status == 202


async def test_sse_client_disconnect_mid_stream(hub: Hub, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    await published(hub, 3000)
    reader, writer = await raw(hub, b"GET /topics/t/events?since=0 HTTP/1.1\r\nHost: h\r\n\r\n")
    assert (await reader.readuntil(b"id: ")).startswith(b"HTTP/1.1 200")
    abort(writer)
    await published(hub, 2000)  # the hub writes to the dead socket
    await wait_for(lambda: hub.app[RUNTIME].feeds.consumer_count == 0)
    assert errors(caplog) == []


async def test_ws_client_disconnect_mid_stream(hub: Hub, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    await published(hub, 3000)
    ws = await hub.session.ws_connect(hub.url + "/topics/t/ws?since=0")
    await ws.receive()
    transport = ws._response.connection.transport if ws._response.connection else None
    assert transport is not None
    transport.abort()
    await published(hub, 2000)
    await wait_for(lambda: hub.app[RUNTIME].feeds.consumer_count == 0)
    assert errors(caplog) == []


async def test_disconnect_mid_body(hub: Hub, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    _, writer = await raw(
        hub,
        b"POST /topics/t HTTP/1.1\r\nHost: h\r\nContent-Type: application/xml\r\n"
        b"Content-Length: 100000\r\n\r\n<urlset",
    )
    abort(writer)
    assert (await hub.session.get(hub.url + "/healthz")).status == 200
    assert errors(caplog) == []


async def test_changelist_reader_disconnect(hub: Hub, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    await published(hub, 20_000)
    for path in ("/topics/t/changelist.xml", "/topics/t/resourcelist.xml"):
        reader, writer = await raw(hub, f"GET {path} HTTP/1.1\r\nHost: h\r\n\r\n".encode())
        await reader.readuntil(b"\r\n\r\n")
        abort(writer)
    async with hub.session.get(hub.url + "/topics/t/changelist.xml") as resp:
        index = await resp.text()
    page = index.split("<loc>")[1].split("</loc>")[0].replace(hub.url, "")
    for _ in range(5):
        reader, writer = await raw(hub, f"GET {page} HTTP/1.1\r\nHost: h\r\n\r\n".encode())
        await reader.readuntil(b"\r\n\r\n")
        abort(writer)
    assert (await hub.session.get(hub.url + "/healthz")).status == 200
    assert errors(caplog) == []
