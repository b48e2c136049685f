"""Publish-ping budgets belong to whoever spends them: refused pings (no token, a wrong
one) spend a small budget of their own per address, never an authorised publisher's, and
each authorised publisher (token) has its own budget, even behind one address."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.conftest import Hub
from tests.hub.test_ping import Source
from tests.hub.test_ping_limit import CountingSource, ping
from tests.support import TIME_SCALE

_RATE, _BURST = 0.2, 3
_REFUSAL_RATE, _REFUSAL_BURST = 0.01, 10
_STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) ")


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {
        "tokens": ["publisher-one", "publisher-two"],
        "ping_rate_per_second": _RATE,
        "ping_burst": _BURST,
        "ping_refusal_rate_per_second": _REFUSAL_RATE,
        "ping_refusal_burst": _REFUSAL_BURST,
    }


@pytest.fixture
async def source() -> AsyncIterator[Source]:
    server = await CountingSource().start()
    yield server
    await server.stop()


def _ping_request(hub: Hub, authorization: str | None) -> bytes:
    """A raw publish ping for a URL that must never be fetched (refused before)."""
    body = urlencode({"hub.mode": "publish", "hub.url": "http://source.invalid/n.xml"})
    host = hub.url.removeprefix("http://")
    auth = f"Authorization: {authorization}\r\n" if authorization else ""
    return (
        f"POST / HTTP/1.1\r\nHost: {host}\r\n{auth}"
        f"Content-Type: application/x-www-form-urlencoded\r\n"
        f"Content-Length: {len(body)}\r\n\r\n{body}"
    ).encode()


async def _pipelined(hub: Hub, request: bytes, count: int) -> list[int]:
    """``request`` sent ``count`` times on one kept-alive connection, pipelined; the
    statuses of the answers, in order."""
    port = int(hub.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    statuses: list[int] = []
    unread = b""
    try:
        writer.write(request * count)  # buffered: read while it goes out
        async with asyncio.timeout(60 * TIME_SCALE):
            while len(statuses) < count:
                chunk = await reader.read(1 << 16)
                if not chunk:
                    break
                unread += chunk
                end = 0
                for match in _STATUS.finditer(unread):
                    statuses.append(int(match.group(1)))
                    end = match.end()
                unread = unread[max(end, len(unread) - 16) :]  # a status line's start
    finally:
        writer.close()
    return statuses


@pytest.mark.timeout(120)
async def test_ten_thousand_refused_pings_leave_an_authorised_publishers_pings_untouched(
    hub: Hub, source: CountingSource
) -> None:
    started = time.monotonic()
    # 10,000 refused pings from the publisher's own address: no token, or a wrong one.
    batches = [
        _pipelined(hub, _ping_request(hub, auth), 1000) for auth in [None, "Bearer wrong"] * 5
    ]
    statuses = Counter(s for batch in await asyncio.gather(*batches) for s in batch)
    took = time.monotonic() - started
    assert sum(statuses.values()) == 10_000, statuses
    assert set(statuses) <= {401, 403, 429}, statuses
    # The refusals' own budget: its burst, and what refilled meanwhile; then 429s.
    refused = statuses[401] + statuses[403]
    assert _REFUSAL_BURST <= refused <= _REFUSAL_BURST + _REFUSAL_RATE * took + 1, statuses
    assert source.fetches == 0
    # The authorised publisher on the same address: its whole burst, untouched.
    one = {"Authorization": "Bearer publisher-one"}
    for _ in range(_BURST):
        status, body, _ = await ping(hub, source.url, **one)
        assert status == 202, body
    assert source.fetches == _BURST
    # Its own budget still holds it...
    status, body, retry_after = await ping(hub, source.url, **one)
    assert status == 429 and "too many publish pings" in body["error"], body
    assert retry_after is not None
    # ...and is its own: another publisher behind the same address has a full one.
    status, body, _ = await ping(hub, source.url, Authorization="Bearer publisher-two")
    assert status == 202, body
    # A refused ping over the refusals' budget says so, and how to get through.
    status, body, retry_after = await ping(hub, source.url)
    assert status == 429 and "too many refused publish pings" in body["error"], body
    assert "valid token" in body["error"] and retry_after is not None


async def test_refusals_within_their_budget_are_answered_401_and_403(
    hub: Hub, source: CountingSource
) -> None:
    assert (await ping(hub, source.url))[0] == 401
    assert (await ping(hub, source.url, Authorization="Bearer wrong"))[0] == 403
    assert (await ping(hub, source.url, Authorization="Bearer publisher-one"))[0] == 202
    assert source.fetches == 1


class TestNoRefusalLimit:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"tokens": ["publisher-one"], "ping_refusal_rate_per_second": 0}

    async def test_zero_turns_the_refusals_limit_off(self, hub: Hub) -> None:
        statuses = await _pipelined(hub, _ping_request(hub, None), 200)
        assert statuses == [401] * 200
