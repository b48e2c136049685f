"""Request bodies sent with a ``Content-Encoding``, decoded within a limit.

aiohttp inflates an encoded request body as it arrives, on the event loop and with no
bound of its own beyond a chunk at a time, even for a route that never reads the body: a
1 MB gzip body of zeros is 1 GiB, and one such request held the loop for seconds, for
everyone. The hub's server therefore takes bodies as they were sent
(``auto_decompress=False``, :func:`hub.web.app.start`), and a handler that reads a body
decodes it with :func:`decode`, in a worker thread, stopping one byte past the route's
limit: a bomb costs the time to inflate ``limit`` bytes, then is refused with 413.

Plain data in, plain data out: no I/O, so the whole rule is unit-tested without sockets.
"""

from __future__ import annotations

import zlib

from hub.core.exceptions import BadRequest, PayloadTooLarge, UnsupportedMediaType

__all__ = ["CODINGS", "codings", "decode"]

#: The codings a request body may have (RFC 9110 §8.4.1; ``x-gzip`` is gzip's old name).
CODINGS = ("gzip", "x-gzip", "deflate")

#: Concatenated gzip members are one body (RFC 1952 §2.2), but each costs a decoder: bounded.
MAX_MEMBERS = 64

_GZIP_MAGIC = b"\x1f\x8b"


def codings(header: str) -> list[str]:
    """The codings that ``Content-Encoding: header`` names, in the order applied, without
    ``identity``; 415 naming any the hub does not decode, or more than one."""
    named = [c.strip().lower() for c in header.split(",")]
    applied = [c for c in named if c and c != "identity"]
    for coding in applied:
        if coding not in CODINGS:
            raise UnsupportedMediaType(
                f"Content-Encoding {coding!a} is not supported: send the body as it is, "
                "or gzip or deflate it"
            )
    if len(applied) > 1:
        raise UnsupportedMediaType(
            f"Content-Encoding {header.strip()!a} names {len(applied)} codings: "
            "send one (gzip or deflate) at most"
        )
    return applied


def decode(body: bytes, header: str, limit: int) -> bytes:
    """``body`` as it was before ``Content-Encoding: header`` was applied.

    Raises :class:`PayloadTooLarge` (413) as soon as the decoded body would be longer than
    ``limit``, without decoding further; :class:`UnsupportedMediaType` (415) for a coding
    the hub does not decode; :class:`BadRequest` (400) for a body that is not what it says.
    """
    applied = codings(header)
    if not applied:
        return _bounded(body, limit, "")
    coding = "gzip" if applied[0] == "x-gzip" else applied[0]
    try:
        if coding == "gzip":
            return _gunzip(body, limit)
        return _inflate(body, limit)
    except zlib.error as exc:
        raise BadRequest(f"the body is not valid {coding} (Content-Encoding): {exc}") from None


def _bounded(body: bytes, limit: int, coding: str) -> bytes:
    if len(body) > limit:
        encoded = f" once decoded ({coding})" if coding else ""
        raise PayloadTooLarge(f"the request body is larger than {limit} bytes{encoded}")
    return body


def _gunzip(body: bytes, limit: int) -> bytes:
    out: list[bytes] = []
    produced, rest, members = 0, body, 0
    while True:
        members += 1
        if members > MAX_MEMBERS:
            raise BadRequest(f"the gzip body has more than {MAX_MEMBERS} members")
        decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        chunk = decoder.decompress(rest, limit + 1 - produced)
        produced += len(chunk)
        out.append(chunk)
        _bounded_so_far(produced, limit, "gzip")
        if not decoder.eof:
            raise BadRequest("the gzip body ends before its stream does (truncated)")
        rest = decoder.unused_data
        if not rest.strip(b"\0"):  # trailing NULs: padding some writers leave
            return b"".join(out)
        if not rest.startswith(_GZIP_MAGIC):
            raise BadRequest("the gzip body has bytes after its stream that are not gzip")


def _inflate(body: bytes, limit: int) -> bytes:
    # RFC 9110 says zlib (RFC 1950); some clients send raw deflate (RFC 1951): take both,
    # as browsers and aiohttp do, telling them apart by the zlib header's check bits.
    zlib_wrapped = len(body) >= 2 and body[0] & 0x0F == 8 and (body[0] << 8 | body[1]) % 31 == 0
    decoder = zlib.decompressobj(zlib.MAX_WBITS if zlib_wrapped else -zlib.MAX_WBITS)
    chunk = decoder.decompress(body, limit + 1)
    _bounded_so_far(len(chunk), limit, "deflate")
    if not decoder.eof:
        raise BadRequest("the deflate body ends before its stream does (truncated)")
    if decoder.unused_data.strip(b"\0"):
        raise BadRequest("the deflate body has bytes after its stream")
    return chunk


def _bounded_so_far(produced: int, limit: int, coding: str) -> None:
    if produced > limit:
        raise PayloadTooLarge(
            f"the request body is larger than {limit} bytes once decoded ({coding})"
        )
