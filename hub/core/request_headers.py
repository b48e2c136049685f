"""The one rule for reading a request header: printable ASCII, or a 400 naming the header.

Every header the hub reads is text of a defined ASCII grammar (a token, a URL, an event id,
a media type...), so a value with any other byte cannot mean what the hub would take it
for. Left to each reader, such a value was a crash: aiohttp hands undecodable bytes over
as lone surrogates, which no ``str.encode`` takes, so a token compare or an error message
that quoted it answered 500 with a traceback. Both request paths apply this one rule: aiohttp's
refuses such a request before any handler runs (:func:`check`), and the lean paths (which
read header bytes) decline what it would refuse and decode what they read with
:func:`decoded`. A header the hub does not read (``User-Agent``, say) is never refused.
The refusal never quotes the value: it may be a credential, and it may not be text.
"""

from __future__ import annotations

from collections.abc import Iterable

from hub.core.exceptions import BadRequest

#: The headers the hub (or aiohttp on its behalf) reads, lower case.
READ = frozenset(
    {
        "accept-encoding",
        "access-control-request-headers",
        "access-control-request-method",
        "authorization",
        "connection",
        "content-encoding",
        "content-type",
        "expect",
        "forwarded",
        "host",
        "idempotency-key",
        "if-modified-since",
        "if-none-match",
        "last-event-id",
        "link",
        "origin",
        "sec-fetch-site",
        "sec-websocket-key",
        "sec-websocket-protocol",
        "sec-websocket-version",
        "upgrade",
        "webhook-signature",
        "webhook-timestamp",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-real-ip",
    }
)


def readable(value: str) -> bool:
    """``value`` is printable ASCII (tabs allowed, as between words of a header)."""
    return value.isascii() and (value.isprintable() or value.replace("\t", " ").isprintable())


def refusal(name: str) -> BadRequest:
    return BadRequest(
        f"the {name} header cannot be read: a header value must be printable ASCII "
        "(bytes 0x20-0x7E, or a tab)"
    )


def decoded(name: str, value: str | bytes) -> str:
    """The text of header ``name``'s ``value`` (bytes as received, or aiohttp's text);
    400 naming the header when it is not :func:`readable`."""
    if isinstance(value, bytes):
        if not value.isascii():
            raise refusal(name)
        value = value.decode("ascii")
    if not readable(value):
        raise refusal(name)
    return value


def check(headers: Iterable[tuple[str, str]]) -> None:
    """400 naming the first header the hub reads whose value it cannot (:data:`READ`)."""
    for name, value in headers:
        if not readable(value) and name.lower() in READ:
            raise refusal(name)
