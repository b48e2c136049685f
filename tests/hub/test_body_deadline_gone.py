"""A stalled body whose client leaves at the body deadline is a 499 (or 408), never a 5xx.

When the peer's close and the deadline reach the hub in the same turn of its loop, the 408
meets a connection already closing; it was counted (metrics, access log) as a 500. The
test makes that turn happen every time: it holds the loop (this process's, the hub's) from
just after the client's close until past the deadline.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Any

import pytest

from hub.core.log_format import ACCESS_LOGGER
from tests.conftest import Hub
from tests.support import wait_for

_BODY_TIMEOUT = 0.5


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"body_timeout_seconds": _BODY_TIMEOUT, "access_log": True}


def _statuses(caplog: pytest.LogCaptureFixture) -> list[int]:
    return [r.__dict__["status"] for r in caplog.records if r.name == ACCESS_LOGGER]


@pytest.mark.parametrize("framing", ["chunked", "length"])
async def test_a_client_gone_at_the_body_deadline_is_499_not_500(
    hub: Hub, caplog: pytest.LogCaptureFixture, framing: str
) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    host = f"{hub.settings.host}:{hub.settings.port}"
    body = (
        "Transfer-Encoding: chunked\r\n\r\n5\r\n<x/>"
        if framing == "chunked"
        else ("Content-Length: 1000\r\n\r\n<x/>")
    )
    _reader, writer = await asyncio.open_connection(hub.settings.host, hub.settings.port)
    # Expect takes it off the lean path: aiohttp's body deadline is the one under test.
    writer.write(
        f"POST /topics/t HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/xml\r\n"
        f"Expect: 100-continue\r\n{body}".encode()
    )
    await writer.drain()
    await asyncio.sleep(_BODY_TIMEOUT * 0.6)
    writer.transport.get_extra_info("socket").shutdown(socket.SHUT_RDWR)
    # The close and the deadline, both due when the loop next looks.
    time.sleep(_BODY_TIMEOUT)  # noqa: ASYNC251 (the hub held on purpose)
    await wait_for(lambda: len(_statuses(caplog)) == 1)
    writer.close()
    assert _statuses(caplog)[0] in (408, 499), caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
