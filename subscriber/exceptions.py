"""Exceptions raised by :mod:`subscriber`.

The tree::

    SubscriberError               root of everything this package raises
    ├── PushUnavailable           the hub's push channel cannot be reached or was lost
    │   ├── StreamClosed          the hub closed a stream on purpose (code, reason)
    │   └── MalformedEvent        the stream carried what is not a change event
    ├── HubRefused                the hub answered 4xx (bad topic name, bad since): fatal
    │   └── ChangesTrimmed        the hub trimmed changes before delivering them (WebSub)
    │       └── ChangesNoLongerListed  changes.xml no longer lists changes not applied
    ├── SourceError               a Source or hub answered wrongly (the peer's fault)
    │   └── DiscoveryError        no Change List / Resource List found from a start URL
    ├── IntegrityError            fetched bytes do not match the announced length or hash
    ├── UnsafePathError           a URI cannot be mapped to a path inside the mirror
    └── PositionError             the state file exists but cannot be read

Callers that switch transports catch :class:`PushUnavailable`; everything else means
"this change, or this Source, is wrong" and is reported, never silently ignored.
``SourceError``, ``DiscoveryError`` and ``PositionError`` also derive from their
:mod:`rsclient.exceptions` counterparts, which the shared plumbing raises.
"""

from __future__ import annotations

import rsclient.exceptions

__all__ = [
    "ChangesNoLongerListed",
    "ChangesTrimmed",
    "DiscoveryError",
    "HubRefused",
    "IntegrityError",
    "MalformedEvent",
    "PositionError",
    "PushUnavailable",
    "SourceError",
    "StreamClosed",
    "SubscriberError",
    "UnsafePathError",
]


class SubscriberError(Exception):
    """Root of the subscriber's exceptions."""


class PushUnavailable(SubscriberError):
    """The push channel (WebSocket, SSE, WebSub) is unreachable or was lost."""


class MalformedEvent(PushUnavailable):
    """The push stream carried a message that is not a change event (not JSON, a field
    missing or of the wrong kind): push is left for polling, which loses nothing."""


class StreamClosed(PushUnavailable):
    """The hub closed the stream itself, e.g. 1008/1013 when the client is too slow."""

    def __init__(self, code: int | None, reason: str) -> None:
        super().__init__(f"stream closed by the hub: {code} {reason}".rstrip())
        self.code = code
        self.reason = reason


class HubRefused(SubscriberError):
    """The hub refused the request (400, 404, 410): retrying or polling cannot fix it.

    ``message`` is the hub's own (its JSON ``error``).
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"the hub refused: HTTP {status}: {message}")
        self.status = status
        self.message = message


class ChangesTrimmed(HubRefused):
    """A WebSub delivery said retention trimmed changes this subscriber never got (what a
    WebSocket or SSE client hears as 410 Gone). Raised when nobody re-baselines: give
    :class:`~subscriber.follower.Follower` an ``on_gap``, as ``rshub sync`` does."""

    def __init__(self, trimmed_through: str, resourcelist: str | None) -> None:
        where = resourcelist or "the topic's Resource List"
        super().__init__(
            410,
            f"changes through event {trimmed_through} were trimmed before they were "
            f"delivered; re-baseline from {where}",
        )
        self.trimmed_through = trimmed_through
        self.resourcelist = resourcelist


class ChangesNoLongerListed(ChangesTrimmed):
    """The hub's ``changes.xml`` begins with its marker (``rs:md/@rshub:lost-through``):
    changes through that event are no longer listed (retention trimmed them, or more URIs
    changed than one document lists) and this subscriber's position is before them."""

    def __init__(self, lost_through: str, resourcelist: str | None) -> None:
        where = resourcelist or "the topic's Resource List"
        HubRefused.__init__(
            self,
            410,
            f"the hub no longer lists changes through event {lost_through}, which this "
            f"mirror has not applied; re-baseline from {where}",
        )
        self.trimmed_through = lost_through
        self.resourcelist = resourcelist


class SourceError(SubscriberError, rsclient.exceptions.SourceError):
    """A Source or the hub answered with an error or a document we cannot use."""


class DiscoveryError(SourceError, rsclient.exceptions.DiscoveryError):
    """No usable Change List or Resource List could be found from the given URL."""


class IntegrityError(SubscriberError):
    """Fetched bytes do not match the ``length`` or ``hash`` announced for them."""

    def __init__(self, loc: str, detail: str) -> None:
        super().__init__(f"{loc}: {detail}")
        self.loc = loc
        self.detail = detail


class UnsafePathError(SubscriberError):
    """A URI that cannot be mapped to a safe path inside the mirror directory."""


class PositionError(SubscriberError, rsclient.exceptions.StateFileError):
    """The position (state) file exists but is unreadable or corrupt."""
