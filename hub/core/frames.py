"""WebSocket text frames as a server sends them (RFC 6455 §5.2), encoded once per batch.

Every live client of a topic gets the same bytes, so the hub frames a batch once and writes
the frame to each client's transport as it is. A server's frames are never masked and the
hub never fragments or compresses its messages, so a frame is a 2, 4 or 10 byte header and
the payload.
"""

from __future__ import annotations

import struct

_FIN_TEXT = 0x81

#: A server's ping: final, opcode 9, no payload (the hub's heartbeat; the client answers
#: with a pong).
PING_FRAME = b"\x89\x00"


def text_frame(payload: bytes) -> bytes:
    """One final, unmasked text frame carrying ``payload`` (UTF-8 JSON)."""
    size = len(payload)
    if size < 126:
        header = bytes((_FIN_TEXT, size))
    elif size < 1 << 16:
        header = struct.pack("!BBH", _FIN_TEXT, 126, size)
    else:
        header = struct.pack("!BBQ", _FIN_TEXT, 127, size)
    return header + payload


#: The most a close frame's reason may hold (RFC 6455 §5.5: a control frame's payload is at
#: most 125 bytes, two of them the code).
CLOSE_REASON_BYTES = 123


def close_frame(code: int, reason: str) -> bytes:
    """A server's close frame: ``code`` and ``reason`` (UTF-8, cut to
    :data:`CLOSE_REASON_BYTES` on a character boundary)."""
    text = reason.encode()[:CLOSE_REASON_BYTES].decode(errors="ignore").encode()
    payload = struct.pack("!H", code) + text
    return bytes((0x88, len(payload))) + payload
