"""Shared test helpers: building notifications, bounded waits, free ports."""

from __future__ import annotations

import asyncio

#: Scales every timeout in the suite (slow CI machines: RSHUB_TEST_TIME_SCALE=3).
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from xml.sax.saxutils import escape, quoteattr

TIME_SCALE = float(os.environ.get("RSHUB_TEST_TIME_SCALE", "1"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def notification(
    changes: Iterable[dict[str, Any]], *, capability: str = "changelist-notification"
) -> bytes:
    """A change notification with one ``<url>`` per change dict (loc, lastmod, change, ...)."""
    urls = []
    for c in changes:
        attrs = f' change="{c.get("change", "updated")}"'
        for name in ("hash", "length", "type"):
            if name in c:
                attrs += f" {name}={quoteattr(str(c[name]))}"
        links = "".join(
            f"<rs:ln rel={quoteattr(ln['rel'])} href={quoteattr(ln['href'])}/>"
            for ln in c.get("links", [])
        )
        urls.append(
            f"<url><loc>{escape(c['loc'])}</loc><lastmod>{c.get('lastmod', '2026-01-01T00:00:00Z')}"
            f"</lastmod><rs:md{attrs}/>{links}</url>"
        )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:rs="http://www.openarchives.org/rs/terms/">'
        f'<rs:md capability="{capability}"/>' + "".join(urls) + "</urlset>"
    ).encode()


def changes(
    n: int, *, prefix: str = "http://example.org/r", start: int = 0
) -> list[dict[str, Any]]:
    """``n`` updated-changes with distinct locs and non-decreasing lastmods."""
    return [
        {"loc": f"{prefix}{i}", "lastmod": f"2026-01-01T00:00:{(i // 1000) % 60:02d}Z",
         "change": "updated"}
        for i in range(start, start + n)
    ]


async def wait_for(
    condition: Callable[[], bool | Awaitable[bool]], timeout: float = 10.0, interval: float = 0.01
) -> None:
    """Poll ``condition`` until true; fail the test after ``timeout`` seconds (scaled)."""
    deadline = time.monotonic() + timeout * TIME_SCALE
    while True:
        result = condition()
        if asyncio.iscoroutine(result) or isinstance(result, Awaitable):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout * TIME_SCALE:.1f}s")
        await asyncio.sleep(interval)
