"""W3C Datetime (NOTE-datetime-19980827) parsing and formatting.

ResourceSync expresses every time as a W3C Datetime and recommends the complete UTC form
``YYYY-MM-DDThh:mm:ss[.s]Z`` (Section 7). We accept every W3C form and always write the
recommended one, so a parse/format round trip preserves the instant, not the spelling.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

__all__ = ["format_datetime", "parse_datetime"]

UTC = UTC

# The common case, "2013-01-02T13:00:00Z", goes straight to datetime.fromisoformat.
UTC_SECONDS = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z", re.ASCII)

# All six W3C forms: YYYY, YYYY-MM, YYYY-MM-DD, YYYY-MM-DDThh:mmTZD,
# YYYY-MM-DDThh:mm:ssTZD and YYYY-MM-DDThh:mm:ss.sTZD. A time needs a TZD.
_W3C = re.compile(
    r"""
    ([0-9]{4})
    (?:-([0-9]{2})
      (?:-([0-9]{2})
        (?:T([0-9]{2}):([0-9]{2})
          (?::([0-9]{2})(?:\.([0-9]+))?)?
          (?:(Z)|([+-])([0-9]{2}):([0-9]{2}))
        )?
      )?
    )?
    """,
    re.ASCII | re.VERBOSE,
)


def parse_datetime(value: str) -> datetime:
    """Parse a W3C Datetime into a timezone-aware :class:`datetime`.

    Dates without a time mean midnight UTC. A time without a timezone designator is
    ambiguous and rejected, as the W3C note requires a TZD whenever a time is given.
    Fractions beyond microseconds are truncated.

    Raises:
        ValueError: ``value`` is not a W3C Datetime.
    """
    if UTC_SECONDS.fullmatch(value) is not None:
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"not a valid W3C datetime: {value!r}") from None
    match = _W3C.fullmatch(value)
    if match is None:
        raise ValueError(f"not a W3C datetime: {value!r}")
    year, month, day, hh, mm, ss, frac, _zulu, sign, tzh, tzm = match.groups()
    try:
        if tzh is not None:
            offset = timedelta(hours=int(tzh), minutes=int(tzm))
            if offset >= timedelta(hours=24) or int(tzm) >= 60:
                raise ValueError
            tz = timezone(-offset if sign == "-" else offset)
        else:
            tz = UTC
        result = datetime(
            int(year),
            int(month or 1),
            int(day or 1),
            int(hh or 0),
            int(mm or 0),
            int(ss or 0),
            int((frac or "0")[:6].ljust(6, "0")),
            tzinfo=tz,
        )
    except ValueError:
        raise ValueError(f"not a valid W3C datetime: {value!r}") from None
    return result


def format_datetime(value: datetime) -> str:
    """Format ``value`` as ``YYYY-MM-DDThh:mm:ss[.ffffff]Z`` in UTC.

    The fraction appears only when there are microseconds, without trailing zeros.

    Raises:
        ValueError: ``value`` is naive; its instant would be a guess.
    """
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime has no defined instant: {value!r}")
    text = value.astimezone(UTC).replace(tzinfo=None).isoformat()
    if value.microsecond:
        text = text.rstrip("0")
    return text + "Z"
