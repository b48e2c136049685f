"""hub.core.resume_points: ``since=`` as an event id or an ISO 8601 time."""

from __future__ import annotations

import pytest

from hub.core.events import U64_MAX
from hub.core.exceptions import BadRequest
from hub.core.resume_points import ResumePoint, parse_since, parse_time, time_key

#: 2026-11-22T10:00:00Z in ms since the epoch.
MS = 1_795_341_600_000


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("2026-11-22T10:00:00Z", MS),
        ("2026-11-22t10:00:00z", MS),
        ("2026-11-22T10:00Z", MS),
        ("2026-11-22T11:00:00+01:00", MS),
        ("2026-11-22T09:30:00-00:30", MS),
        ("2026-11-22T10:00:00.5Z", MS + 500),
        ("2026-11-22T10:00:00,25Z", MS + 250),
        ("2026-11-22T10:00:00.123456789Z", MS + 123),
        ("1970-01-01T00:00:00Z", 0),
        ("1969-12-31T23:59:59Z", -1000),
        ("0001-01-01T00:00:00Z", -62_135_596_800_000),
        ("9999-12-31T23:59:59.999Z", 253_402_300_799_999),
    ],
)
def test_times_in_iso_8601_with_a_zone(text: str, ms: int) -> None:
    assert parse_time(text) == ms


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-22T10:00:00",  # no zone: whose 10 o'clock?
        "2026-11-22",
        "2026-11-22 10:00:00Z",
        "2026-11-22T10:00:00 01:00",  # a query's '+' read as a space
        "2026-13-01T00:00:00Z",
        "2026-02-30T00:00:00Z",
        "2026-11-22T24:00:00Z",
        "2026-11-22T10:60:00Z",
        "2026-11-22T10:00:61Z",
        "2026-11-22T10:00:00+24:00",
        "2026-11-22T10:00:00+01:60",
        "2026-11-22T10:00:00.Z",
        "2026-11-22T10:00:00.1234567890Z",
        "2026-W47-7T10:00:00Z",
        "２０２６-11-22T10:00:00Z",  # fullwidth digits: digits to \d, not to the grammar
        "2026-11-22T10:00:00Z" + "0" * 100,
        "",
    ],
)
def test_anything_else_is_no_time(text: str) -> None:
    assert parse_time(text) is None


def test_a_time_is_the_position_before_its_first_millisecond() -> None:
    assert time_key(MS) == (MS - 1, U64_MAX)
    assert time_key(0) == time_key(-5) == (0, 0)
    assert parse_since("2026-11-22T10:00:00Z") == ResumePoint((MS - 1, U64_MAX), True)
    assert parse_since("1960-01-01T00:00:00Z") == ResumePoint((0, 0), True)


def test_an_event_id_is_itself() -> None:
    assert parse_since("5-2") == ResumePoint((5, 2), False)
    assert parse_since("5") == ResumePoint((5, 0), False)


@pytest.mark.parametrize("text", ["yesterday", "+5", " 5", "5-", "2026-11-22T10:00:00 01:00"])
def test_neither_is_a_400_naming_the_parameter_and_both_rules(text: str) -> None:
    with pytest.raises(BadRequest) as refused:
        parse_since(text, "Last-Event-ID")
    message = refused.value.message
    assert message.startswith("invalid event id or time in Last-Event-ID")
    assert "<ms>-<seq>" in message and "ISO 8601" in message
    assert refused.value.detail["rule"] and refused.value.detail["time_rule"]
    if " " in text:
        assert "%2B" in message
