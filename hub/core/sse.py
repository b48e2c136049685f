"""Server-sent events as the hub writes them, encoded once per batch.

Every live SSE client of a topic gets the same bytes, so the hub encodes a batch once and
writes it to each client's transport as it is: the ``id:``/``data:`` lines, framed as an
HTTP/1.1 chunk when the response is chunked (an HTTP/1.0 response is not).
"""

from __future__ import annotations

from collections.abc import Iterable


def event_lines(ids_and_json: Iterable[tuple[str, bytes]]) -> bytes:
    """One SSE event per ``(id, json)``: ``id: ID\\ndata: JSON\\n\\n``."""
    return b"".join(b"id: %s\ndata: %s\n\n" % (eid.encode(), data) for eid, data in ids_and_json)


def http_chunk(payload: bytes) -> bytes:
    """``payload`` as one chunk of a chunked HTTP/1.1 body (RFC 9112 §7.1)."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)
