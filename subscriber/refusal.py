"""Telling a hub's final "no" (4xx) from a passing failure, and reading its message.

The hub answers a bad topic name or ``since`` with ``{"error": "...", "status": N}``
(400, 404, 410). Retrying such a request, or polling instead, only hides the mistake.
"""

from __future__ import annotations

import aiohttp
import orjson

__all__ = ["error_message", "error_text", "refusal", "unknown_topic"]


def refusal(status: int) -> bool:
    """Whether ``status`` is a refusal that no retry can fix (4xx but 408 and 429)."""
    return 400 <= status < 500 and status not in (408, 429)


async def error_message(resp: aiohttp.ClientResponse) -> str:
    """The hub's JSON ``error`` text, else the start of the body."""
    return error_text(await resp.content.read(64 * 1024), resp.reason)


def error_text(body: bytes | bytearray, reason: str | None = None) -> str:
    """The hub's JSON ``error`` text in ``body``, else its start, else ``reason``."""
    try:
        data = orjson.loads(body[: 64 * 1024])
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, dict) and "error" in data:
        return str(data["error"])
    return body[:300].decode(errors="replace").strip() or reason or "(empty body)"


def unknown_topic(status: int | None, message: str) -> bool:
    """Whether the hub said the topic was never published to (not yet: not a refusal)."""
    return status == 404 and "unknown topic" in message
