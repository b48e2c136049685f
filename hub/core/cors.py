"""Browser clients on other origins (CORS): who may read and publish, as plain data.

The hub's bearer tokens travel in ``Authorization`` (or ``?access_token=``), never in
cookies, so a grant never includes credentials: an allowed origin's page reads what the
token it holds may read, and no page can use a visitor's ambient authority. Only origins
configured in ``RSHUB_CORS_ORIGINS`` are granted; everything else a browser sends (``null``,
a long or garbled ``Origin``, unknown request headers) gets no grant.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from hub.core.exceptions import Forbidden

#: Longest ``Origin`` / ``Access-Control-Request-Headers`` value looked at.
MAX_ORIGIN = 512
MAX_REQUEST_HEADERS = 1024
#: Methods a page may use: reading (GET, HEAD) and publishing (POST).
METHODS = ("GET", "HEAD", "POST")
#: Request headers a page may set: tokens, publish and resume headers, revalidation.
REQUEST_HEADERS = (
    "authorization",
    "content-type",
    "idempotency-key",
    "last-event-id",
    "link",
    "if-none-match",
    "if-modified-since",
    "cache-control",
)
#: Response headers a page may read beyond the CORS-safelisted ones.
EXPOSED_HEADERS = "Retry-After, ETag, Last-Modified, Link, Location, X-Request-Id"
#: How long a browser may cache a preflight answer.
MAX_AGE_SECONDS = 600


def origin_of(text: str) -> str:
    """A configured origin in the form browsers send it (``scheme://host[:port]``), or ``*``."""
    text = text.strip()
    if text == "*":
        return text
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or port == -1
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or parts.username is not None
    ):
        raise ValueError(f"{text[:100]!r} is not an origin (scheme://host[:port]) nor *")
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    default = {"http": 80, "https": 443}[parts.scheme]
    return f"{parts.scheme}://{host}" + (f":{port}" if port not in (None, default) else "")


class CorsPolicy:
    """The configured origins and the answers they get."""

    def __init__(self, origins: Iterable[str]) -> None:
        listed = frozenset(origins)
        self.any = "*" in listed
        self.origins = listed - {"*"}

    def __bool__(self) -> bool:
        return self.any or bool(self.origins)

    def allows(self, origin: str) -> bool:
        """``origin`` (an ``Origin`` header as sent) may read and publish."""
        return self.any or (len(origin) <= MAX_ORIGIN and origin in self.origins)

    def grant(self, origin: str) -> dict[str, str]:
        """Headers of an answer to an allowed origin's request."""
        return {
            "Access-Control-Allow-Origin": "*" if self.any else origin,
            "Access-Control-Expose-Headers": EXPOSED_HEADERS,
        }

    def preflight(
        self, origin: str, method: str, request_headers: str, allowed_methods: Iterable[str]
    ) -> dict[str, str]:
        """Headers of a granted preflight, or 403 naming why not.

        ``allowed_methods``: what the requested URL answers (so a grant never promises a
        method the hub would then refuse).
        """
        if not self.allows(origin):
            raise Forbidden(
                f"origin {origin[:100]!r} may not use this hub from a browser "
                "(it is not in RSHUB_CORS_ORIGINS)"
            )
        method = method.strip()
        if method not in METHODS or method not in allowed_methods:
            raise Forbidden(
                f"Access-Control-Request-Method {method[:20]!r} is not allowed here "
                f"(allowed: {', '.join(m for m in METHODS if m in allowed_methods)})"
            )
        if len(request_headers) > MAX_REQUEST_HEADERS:
            raise Forbidden("Access-Control-Request-Headers is too long")
        asked = [h.strip().lower() for h in request_headers.split(",") if h.strip()]
        refused = [h for h in asked if h not in REQUEST_HEADERS]
        if refused:
            raise Forbidden(
                f"request header {refused[0][:40]!r} is not allowed from a browser "
                f"(allowed: {', '.join(REQUEST_HEADERS)})"
            )
        return {
            **self.grant(origin),
            "Access-Control-Allow-Methods": ", ".join(m for m in METHODS if m in allowed_methods),
            "Access-Control-Allow-Headers": ", ".join(REQUEST_HEADERS),
            "Access-Control-Max-Age": str(MAX_AGE_SECONDS),
        }
