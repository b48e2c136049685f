"""WebSocket text frames, decoded back by the rules of RFC 6455 §5.2."""

from __future__ import annotations

import struct

import pytest

from hub.core.frames import text_frame


def decode(frame: bytes) -> tuple[int, bool, bytes]:
    """(first byte, masked, payload) of one frame."""
    first, second = frame[0], frame[1]
    size, offset = second & 0x7F, 2
    if size == 126:
        (size,) = struct.unpack("!H", frame[2:4])
        offset = 4
    elif size == 127:
        (size,) = struct.unpack("!Q", frame[2:10])
        offset = 10
    payload = frame[offset:]
    assert len(payload) == size
    return first, bool(second & 0x80), payload


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65_535, 65_536, 200_000])
def test_text_frame_round_trips_at_every_length_boundary(size: int) -> None:
    payload = bytes(i % 251 for i in range(size))
    first, masked, decoded = decode(text_frame(payload))
    assert first == 0x81  # FIN, text
    assert not masked  # a server never masks
    assert decoded == payload


def test_smallest_header_for_each_length() -> None:
    assert len(text_frame(b"x" * 125)) == 2 + 125
    assert len(text_frame(b"x" * 126)) == 4 + 126
    assert len(text_frame(b"x" * 65_536)) == 10 + 65_536
