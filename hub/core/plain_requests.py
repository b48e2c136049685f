"""Which requests the lean paths may take: the plainly valid ones, by one rule.

The lean paths (``hub.web.lean_connection``) serve plain publishes and SSE subscribes
beside aiohttp and promise aiohttp's very answer. They can keep that promise only for a
request that aiohttp's own parser takes exactly as it is: one that aiohttp refuses (its 400
"Got more than 8190 bytes", "Missing 'Host' header"...) or reads in some other way must
reach aiohttp untouched, every byte of it, so that aiohttp answers it as it would have.
:class:`PlainRequests` is that rule, the one place it is written. A request is plain when:

- its head (request line, header lines, the empty line) is at most :data:`HEAD_BYTES`
  bytes: the lean paths wait for no more (a plain request's head is a few hundred bytes);
- its request line is ``GET`` or ``POST`` (the lean routes' methods), one space, an
  origin-form target (``/`` then visible ASCII) of at most aiohttp's ``max_line_size``
  bytes, one space, ``HTTP/1.1``, CRLF. HTTP/1.0 (other keep-alive rules, no ``Host``
  needed) and every other version are aiohttp's;
- each header line is a token name, the colon right after it, optional spaces or tabs, and
  a value of visible ASCII, with spaces or tabs inside but none at its end, then CRLF: no
  bare CR or LF, no folded line, no other byte. (Where two llhttp builds could read a byte
  differently, or aiohttp strips what llhttp kept, the request is not plain);
- it has at most aiohttp's ``max_headers`` headers, each name and value together at most
  its ``max_field_size`` bytes, as aiohttp counts them;
- no header name comes twice (aiohttp refuses some twice, and joins others);
- it has a ``Host`` (RFC 9112 §3.2: an HTTP/1.1 request without one is a 400);
- it has none of :data:`FRAMING`: headers that change how aiohttp frames, decodes or
  answers the request (chunked bodies, content codings, ``Expect``, connection options,
  upgrades);
- a ``Content-Length``, if any, is decimal digits only.

Each lean route then takes only the headers it reads or that change nothing in its answer
(``hub.web.lean_publish``, ``hub.web.lean_sse``), and decides the rest (topic, token, body)
by the same code as aiohttp's handler. tests/hub/test_lean_differential.py sends the same
bytes to a hub with the lean paths and to one without and compares what comes back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["FRAMING", "HEAD_BYTES", "PlainRequests"]

#: The largest head the lean paths take (and wait for before they leave it to aiohttp).
HEAD_BYTES = 8192

#: Headers that make a request not plain, lower case.
FRAMING = frozenset(
    {
        b"transfer-encoding",
        b"content-encoding",
        b"expect",
        b"connection",
        b"keep-alive",
        b"upgrade",
        b"te",
        b"trailer",
        b"http2-settings",
        b"sec-websocket-key1",
    }
)

#: The head's grammar (RFC 9112 §2-5, narrowed as the module docstring says): possessive
#: repeats and a value's end looked behind for, so nothing backtracks (~50 instructions a
#: byte of head: half the rule's cost, ~3% of a lean publish's instructions).
_HEAD = re.compile(
    rb"(?:GET|POST) /[\x21-\x7e]*+ HTTP/1\.1\r\n"
    rb"(?:[!#$%&'*+.^_`|~0-9A-Za-z-]++:[\x20-\x7e\t]*+(?<![ \t])\r\n)*+"
    rb"\r\n"
)


@dataclass(frozen=True, slots=True)
class PlainRequests:
    """The rule, with aiohttp's limits (those its request handler holds)."""

    #: aiohttp's longest request target (it counts the target alone).
    max_line_size: int
    #: aiohttp's longest header: name and value together.
    max_field_size: int
    #: aiohttp's most headers.
    max_headers: int

    def plain(
        self, received: bytes, target: bytes, headers: list[tuple[bytes, bytes]]
    ) -> dict[bytes, bytes] | None:
        """The headers by lower-case name of a plain request (each name once, each value
        ASCII), else None. ``received``: its bytes from its first, its whole head at least
        (the head ends at its first empty line: where llhttp saw it end earlier, at a bare
        LF, the pattern meets that LF); ``target`` and ``headers``: as llhttp read them."""
        if len(target) > self.max_line_size or len(headers) > self.max_headers:
            return None
        head = _HEAD.match(received, 0, HEAD_BYTES)
        if head is None:
            return None
        named: dict[bytes, bytes] = {}
        for name, value in headers:
            named[name.lower()] = value
        if len(named) < len(headers) or b"host" not in named or not FRAMING.isdisjoint(named):
            return None
        length = named.get(b"content-length")
        if length is not None and not length.isdigit():
            return None
        if head.end() > self.max_field_size and any(  # (else no header can be longer)
            len(name) + len(value) > self.max_field_size for name, value in headers
        ):
            return None
        return named
