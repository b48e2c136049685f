"""Where a stream resumes: ``since=`` (and SSE's ``Last-Event-ID``) as the hub reads it.

A resume point is an event id or a time:

* an event id, ``<ms>-<seq>`` or ``<ms>`` (:func:`hub.core.events.parse_id`): resume after
  that event;
* an ISO 8601 time with its zone, ``2026-11-22T10:00:00Z`` (seconds, a fraction and an
  offset such as ``+01:00`` optional; Wikimedia EventStreams' ``since``): the events the
  hub received at or after that time. An event id *is* the time the hub received the event
  (its Redis stream id, ``<ms>-<seq>``), so a time is the position just before the first id
  of its millisecond, ``(ms - 1)-(2**64 - 1)``; a time before 1970 is everything retained.

A stream of several topics also resumes from a composite id
(:mod:`hub.core.stream_positions`). Each of these is another party's text: the grammar is
strict (ASCII digits only, no spaces, a zone required), and anything else is a 400 naming
the parameter and both rules.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import NamedTuple

from hub.core.events import ID_RULE, U64_MAX, EventKey, parse_id
from hub.core.exceptions import BadRequest

#: What a time must look like, as a 400 says it.
TIME_RULE = (
    "a time is ISO 8601 with its zone: YYYY-MM-DDThh:mm[:ss[.fraction]] then Z or "
    "+hh:mm/-hh:mm, e.g. 2026-11-22T10:00:00Z"
)
#: The time grammar: ASCII digits only (``\d`` would take any Unicode digit).
_TIME = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2})"
    r"(?::([0-9]{2})(?:[.,]([0-9]{1,9}))?)?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
#: Longest value looked at: the longest time is 35 characters, the longest id 41.
_MAX_CHARS = 64


class ResumePoint(NamedTuple):
    """Where to resume: after ``key``; ``moment``: it was given as a time (a time is not
    checked against the stream's last id: a moment with nothing after it is no typo)."""

    key: EventKey
    moment: bool


def time_key(epoch_ms: int) -> EventKey:
    """The position just before every event received at or after ``epoch_ms``."""
    return (epoch_ms - 1, U64_MAX) if epoch_ms > 0 else (0, 0)


def parse_time(value: str) -> int | None:
    """``value`` as milliseconds since the epoch (negative before 1970); None when it is not
    a time by :data:`TIME_RULE` (a date that does not exist, a 24th hour, a 61st second...)."""
    match = _TIME.fullmatch(value) if len(value) <= _MAX_CHARS else None
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        offset = timedelta(0)
        if zone not in ("Z", "z"):
            hours, minutes = int(zone[1:3]), int(zone[4:6])
            if hours > 23 or minutes > 59:
                return None
            offset = timedelta(hours=hours, minutes=minutes) * (-1 if zone[0] == "-" else 1)
        moment = datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second or 0),
            int((fraction or "0")[:6].ljust(6, "0")),
            tzinfo=timezone(offset),
        )
    except ValueError:  # month 13, February 30th, hour 24...
        return None
    return (moment - _EPOCH) // _MS


def parse_since(value: str, what: str = "since") -> ResumePoint:
    """``value`` (of the parameter or header ``what``) as a resume point; 400 naming
    ``what`` and both rules when it is neither an event id nor a time."""
    try:
        return ResumePoint(parse_id(value), False)
    except BadRequest:
        pass
    epoch_ms = parse_time(value)
    if epoch_ms is not None:
        return ResumePoint(time_key(epoch_ms), True)
    hint = " (in a query '+' is a space: write %2B)" if " " in value else ""
    raise BadRequest(
        f"invalid event id or time in {what}: {value[:_MAX_CHARS]!r}{hint}; {ID_RULE}; "
        f"or {TIME_RULE}",
        rule=ID_RULE,
        time_rule=TIME_RULE,
    )
