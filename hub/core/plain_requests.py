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

#: The head's grammar (RFC 9112 §2-5, narrowed as the module docstring says).
_HEAD = re.compile(
    rb"(?:GET|POST) /[\x21-\x7e]* HTTP/1\.1\r\n"
    rb"(?:[!#$%&'*+.^_`|~0-9A-Za-z-]+:[ \t]*(?:[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?)?\r\n)*"
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

    def plain(self, head: bytes, target: bytes, headers: list[tuple[bytes, bytes]]) -> bool:
        """Whether the request whose ``head`` (its bytes up to and with the empty line),
        ``target`` and ``headers`` (as llhttp read them) are these is plain."""
        if (
            len(head) > HEAD_BYTES
            or len(target) > self.max_line_size
            or len(headers) > self.max_headers
            or _HEAD.fullmatch(head) is None
        ):
            return False
        seen: set[bytes] = set()
        for name, value in headers:
            key = name.lower()
            if key in seen or key in FRAMING or len(name) + len(value) > self.max_field_size:
                return False
            if key == b"content-length" and not value.isdigit():
                return False
            seen.add(key)
        return b"host" in seen
