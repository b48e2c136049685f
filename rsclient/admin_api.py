"""The hub's admin API as the command-line tools call it: one JSON request, standard
library only (the commands that use it must start without aiohttp), the hub's own error
message on a refusal."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

#: How long one admin request may take, connect to answer.
TIMEOUT_SECONDS = 10.0


class AdminApiError(Exception):
    """The hub refused the request (``HTTP code: the hub's message``) or could not be
    reached (``URL: why``)."""


def call(
    hub: str,
    admin_token: str | None,
    method: str,
    path: str,
    body: dict[str, str] | None = None,
    timeout: float = TIMEOUT_SECONDS,
) -> dict[str, Any]:
    """``method hub+path`` with ``body`` as JSON (an empty body for a bare POST), the admin
    token as a bearer token when given; the answer's JSON object."""
    url = hub.rstrip("/") + path
    data = json.dumps(body).encode() if body is not None else b"" if method == "POST" else None
    request = urllib.request.Request(url, method=method, data=data)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    if admin_token:
        request.add_header("Authorization", f"Bearer {admin_token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer: dict[str, Any] = json.loads(response.read())
            return answer
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read()).get("error") or exc.reason
        except (ValueError, AttributeError):
            message = exc.reason
        raise AdminApiError(f"{exc.code}: {message}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise AdminApiError(f"{url}: {getattr(exc, 'reason', exc)}") from None
