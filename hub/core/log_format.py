"""How the hub logs: plain text for people, or one JSON object per line for collectors.

Every record carries the id of the HTTP request it was logged for (``request_id``), taken
from a context variable that :mod:`hub.web.observe` sets for each request, so the lines of
one request can be found together; the same id is the response's ``X-Request-Id``.
"""

from __future__ import annotations

import contextvars
import logging
import sys
from datetime import UTC, datetime
from typing import TextIO

import orjson

#: The id of the request being handled, or ``None`` outside any request.
REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "rshub_request_id", default=None
)

#: Logger of the opt-in access log (one line per request).
ACCESS_LOGGER = "rshub.access"

_TEXT = "%(asctime)s %(levelname)s %(name)s%(request_tag)s: %(message)s"
#: LogRecord attributes that are not extra fields given by the caller.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "request_tag"}


class _RequestIdFilter(logging.Filter):
    """Adds ``request_id`` (and the text format's ``request_tag``) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = getattr(record, "request_id", None) or REQUEST_ID.get()
        record.request_id = rid
        record.request_tag = f" [{rid}]" if rid else ""
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id, extras."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": getattr(record, "request_id", None),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def configure(level: str, fmt: str, stream: TextIO | None = None) -> None:
    """Send every log record to ``stream`` (stderr) at ``level``, as ``fmt`` (json|text)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(_RequestIdFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(_TEXT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
