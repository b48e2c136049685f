"""Exceptions raised by :mod:`rsclient`.

The tree::

    RsClientError            root of everything this package raises
    ├── EventStreamError     an event stream cannot be read (e.g. a line beyond the limit)
    ├── StateFileError       a state file cannot be read or written
    └── SourceError          a Source (or a hub serving documents) answered unusably
        ├── NotResourceSync  it answered with something else than a ResourceSync document
        └── DiscoveryError   the walk from a start URL leads to no usable document

:mod:`publisher` and :mod:`subscriber` re-raise these as their own types (whose roots
their callers catch); those types also derive from the ones here.
"""

from __future__ import annotations

__all__ = [
    "DiscoveryError",
    "EventStreamError",
    "NotResourceSync",
    "RsClientError",
    "SourceError",
    "StateFileError",
]


class RsClientError(Exception):
    """Root of the exceptions of :mod:`rsclient`."""


class EventStreamError(RsClientError):
    """An event stream is unusable: the server broke the format or its limits."""


class StateFileError(RsClientError):
    """A state file exists but cannot be read, or cannot be written."""


class SourceError(RsClientError):
    """A Source answered with an HTTP error, not at all, or with no ResourceSync document.

    ``status`` is the HTTP status of an error answer (``None`` for the other failures).
    """

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NotResourceSync(SourceError):
    """The URL answered 200 with something that is not a ResourceSync document."""


class DiscoveryError(SourceError):
    """The documents reachable from the start URL lead to no Change List."""
