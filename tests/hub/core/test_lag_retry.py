"""What a client dropped as too slow is told: its resume point and a wait of its own."""

from __future__ import annotations

import random
from collections import Counter

from hub.core.events import U64_MAX, format_id
from hub.core.frames import CLOSE_REASON_BYTES, close_frame
from hub.core.lag_retry import TRY_AGAIN_LATER, retry_after, ws_reason
from rsclient.backoff import parse_retry_hint


def test_the_reason_names_the_resume_point_and_the_wait_as_clients_read_it() -> None:
    reason = ws_reason("1733150000000-3", 4.256)
    assert reason == "too slow; resume with since=1733150000000-3; retry after 4.26 s"
    assert parse_retry_hint(reason) == 4.26


def test_the_longest_reason_fits_a_close_frame_whole() -> None:
    reason = ws_reason(format_id((U64_MAX, U64_MAX)), 3600.0)
    assert len(reason.encode()) <= CLOSE_REASON_BYTES
    frame = close_frame(TRY_AGAIN_LATER, reason)
    assert frame[0] == 0x88 and frame[1] == len(frame) - 2 <= 125
    assert int.from_bytes(frame[2:4], "big") == 1013 and frame[4:].decode() == reason


def test_a_composite_id_too_long_for_a_close_frame_points_to_the_last_message() -> None:
    reason = ws_reason("m1." + "A" * 200, 1.0)
    assert reason == (
        "too slow; resume with since=<the id of the last message>; retry after 1.00 s"
    )
    assert len(reason.encode()) <= CLOSE_REASON_BYTES


def test_waits_spread_over_the_window_with_no_100_ms_crowded() -> None:
    rng = random.Random(7)
    waits = [retry_after(10.0, rng) for _ in range(1000)]
    assert all(0 <= w <= 10 for w in waits)
    assert max(waits) - min(waits) > 9
    assert max(Counter(int(w * 10) for w in waits).values()) <= 30  # of 1,000; ~10 expected


def test_no_spread_means_at_once() -> None:
    assert retry_after(0.0) == 0.0
    assert parse_retry_hint(ws_reason("5-0", retry_after(0.0))) == 0.0


def test_a_close_reason_is_cut_whole_characters_to_what_a_frame_carries() -> None:
    frame = close_frame(1000, "é" * 100)  # 200 bytes: cut to 123, then to whole characters
    assert frame[1] == 2 + 122 and frame[4:].decode() == "é" * 61
