"""W3C Datetime parsing and formatting (Section 7, W3C NOTE-datetime-19980827)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from resourcesync import format_datetime, parse_datetime


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2013", datetime(2013, 1, 1, tzinfo=UTC)),
        ("2013-07", datetime(2013, 7, 1, tzinfo=UTC)),
        ("2013-07-16", datetime(2013, 7, 16, tzinfo=UTC)),
        ("2013-07-16T19:20Z", datetime(2013, 7, 16, 19, 20, tzinfo=UTC)),
        ("2013-07-16T19:20+01:00", datetime(2013, 7, 16, 18, 20, tzinfo=UTC)),
        ("2013-07-16T19:20:30Z", datetime(2013, 7, 16, 19, 20, 30, tzinfo=UTC)),
        ("2013-07-16T19:20:30-05:30", datetime(2013, 7, 17, 0, 50, 30, tzinfo=UTC)),
        ("2013-07-16T19:20:30.45Z", datetime(2013, 7, 16, 19, 20, 30, 450000, tzinfo=UTC)),
        ("2013-07-16T19:20:30.1234567+00:00", datetime(2013, 7, 16, 19, 20, 30, 123456, UTC)),
    ],
)
def test_parse_every_w3c_form(text: str, expected: datetime) -> None:
    value = parse_datetime(text)
    assert value == expected
    assert value.tzinfo is not None


def test_parse_keeps_offset() -> None:
    value = parse_datetime("2013-07-16T19:20:30+01:00")
    assert value.utcoffset() == timedelta(hours=1)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "13",
        "2013-7-16",
        "2013-07-16T19:20:30",  # a time needs a timezone designator
        "2013-07-16T19:20",
        "2013-07-16T19Z",
        "2013-07-16 19:20:30Z",
        "20130716T192030Z",
        "2013-W29-2",
        "2013-02-30",
        "2013-13-01T00:00:00Z",
        "2013-01-01T24:00:00Z",
        "2013-01-01T00:00:60Z",
        "2013-01-01T00:00:00+24:00",
        "2013-01-01T00:00:00+01:60",
        "2013-01-01T00:00:00.Z",
        "٢٠١٣-01-01",
        " 2013-01-01",
    ],
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="W3C"):
        parse_datetime(text)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (datetime(2013, 1, 2, 13, tzinfo=UTC), "2013-01-02T13:00:00Z"),
        (datetime(2013, 1, 2, 13, 0, 0, 500000, tzinfo=UTC), "2013-01-02T13:00:00.5Z"),
        (datetime(2013, 1, 2, 13, 0, 0, 123, tzinfo=UTC), "2013-01-02T13:00:00.000123Z"),
        (datetime(2013, 1, 2, 14, tzinfo=timezone(timedelta(hours=1))), "2013-01-02T13:00:00Z"),
        (datetime(999, 1, 2, tzinfo=UTC), "0999-01-02T00:00:00Z"),
    ],
)
def test_format(value: datetime, text: str) -> None:
    assert format_datetime(value) == text
    assert parse_datetime(text) == value


def test_format_rejects_naive() -> None:
    with pytest.raises(ValueError, match="naive"):
        format_datetime(datetime(2013, 1, 2))
