"""A sans-I/O reader of ``text/event-stream`` (HTML Living Standard, "Server-sent events").

Feed it decoded lines with :meth:`SSEReader.feed_line`; it returns a complete
:class:`SSEMessage` at each blank line. It keeps the last event id across messages, as the
standard's ``Last-Event-ID`` requires.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["SSEMessage", "SSEReader"]


class SSEMessage(NamedTuple):
    event: str
    data: str
    id: str | None


class SSEReader:
    def __init__(self) -> None:
        self.last_id: str | None = None
        self._event = ""
        self._data: list[str] = []
        self._has_id = False

    def feed_line(self, line: str) -> SSEMessage | None:
        """One line without its end-of-line; a message when ``line`` is blank."""
        if line == "":
            if not self._data:
                self._event = ""
                return None
            msg = SSEMessage(self._event or "message", "\n".join(self._data), self.last_id)
            self._event, self._data = "", []
            return msg
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self.last_id = value
        return None
