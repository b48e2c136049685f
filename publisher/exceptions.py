"""Exceptions raised by :mod:`publisher`.

The tree::

    PublisherError                  root of everything this package raises on purpose
    ├── UsageError                  we were misused: bad arguments, closed publisher
    ├── QueueFullError              the bounded queue is full (the hub is down or slow)
    ├── UnsentChangesError          close() could not deliver everything it held
    ├── PublishFailed               the hub did not store a notification
    │   ├── HubUnavailable          unreachable, 5xx or 429 past the retry budget
    │   └── PublishRejected         a 4xx answer: the notification or token is wrong;
    │                               never retried, ``status`` and the hub's ``error`` text
    ├── FeedError                   an edit feed (SSE stream or recorded file) is unusable
    ├── SourceError                 a ResourceSync Source (bridge) answered something unusable
    │   └── WrongSource             the bridge's start URL is no Source it can start from
    └── StateError                  a state file cannot be read or written

"The peer was wrong" (``PublishRejected``, ``FeedError``, ``SourceError``) is kept apart
from "the network was down" (``HubUnavailable``), which callers may simply retry later.
``SourceError`` and ``StateError`` also derive from their :mod:`rsclient.exceptions`
counterparts (``SourceError``, ``StateFileError``), which the shared plumbing raises.
"""

from __future__ import annotations

import rsclient.exceptions

__all__ = [
    "FeedError",
    "HubUnavailable",
    "PublishFailed",
    "PublishRejected",
    "PublisherError",
    "QueueFullError",
    "SourceError",
    "StateError",
    "UnsentChangesError",
    "UsageError",
    "WrongSource",
]


class PublisherError(Exception):
    """Root of every error :mod:`publisher` raises on purpose."""


class UsageError(PublisherError):
    """The library or a command was called wrongly (bad argument, publisher closed)."""


class QueueFullError(PublisherError):
    """The bounded queue of unsent changes is full; the change was *not* accepted.

    Raised by :meth:`publisher.Publisher.submit` so that a caller always learns that a
    change was refused; nothing is ever dropped silently.
    """

    def __init__(self, message: str, *, queued: int, limit: int) -> None:
        super().__init__(message)
        #: Changes queued when the new ones were refused.
        self.queued = queued
        #: The queue's bound (``max_queued``).
        self.limit = limit


class UnsentChangesError(PublisherError):
    """``close()`` gave up with changes still unsent; ``count`` says how many."""

    def __init__(self, message: str, *, count: int) -> None:
        super().__init__(message)
        self.count = count


class PublishFailed(PublisherError):
    """The hub did not store a notification: it was unreachable, or it refused it.

    (Not to be confused with :class:`hub.core.exceptions.HubError`, the hub's own root.)
    """


class HubUnavailable(PublishFailed):
    """The hub could not be reached, or kept failing, for longer than the retry budget."""


class PublishRejected(PublishFailed):
    """The hub refused the notification with a 4xx answer; retrying would not help."""

    def __init__(self, message: str, *, status: int, error: str) -> None:
        super().__init__(message)
        #: The HTTP status the hub answered.
        self.status = status
        #: The hub's ``{"error": ...}`` text (or the raw body when it was not JSON).
        self.error = error


class FeedError(PublisherError):
    """An edit feed (an SSE stream or a recorded file) cannot be read."""


class SourceError(PublisherError, rsclient.exceptions.SourceError):
    """A ResourceSync Source answered with something the bridge cannot use."""


class StateError(PublisherError, rsclient.exceptions.StateFileError):
    """A state file is unreadable or cannot be written."""


class WrongSource(SourceError):
    """The bridge's start URL is not ResourceSync (an HTML page, say), or a document it
    cannot start from: polling again will not change that."""
