"""Subscriber: receive a topic's changes and keep a local mirror in sync.

The library: :class:`Follower` hands over batches of :class:`ChangeEvent` from the hub's
push channels (:class:`HubStream` for WebSocket/SSE, :class:`CallbackReceiver` for WebSub)
and falls back to polling Change Lists (:class:`Poller`), delivering each change once
(:class:`EventCursor`, saved by :class:`EventCursorFile`). :class:`Mirror` applies the
changes to a local directory. Errors: :mod:`subscriber.exceptions`. The plumbing it shares
with :mod:`publisher` is in :mod:`rsclient`.
"""

from .audit import AuditReport, RepairReport
from .callback import CallbackReceiver
from .events import ChangeEvent, Gap
from .exceptions import (
    ChangesNoLongerListed,
    ChangesTrimmed,
    DiscoveryError,
    IntegrityError,
    PositionError,
    PushUnavailable,
    SourceError,
    StreamClosed,
    SubscriberError,
    UnsafePathError,
)
from .filters import ChangeFilter
from .follower import Follower
from .mirror import Mirror, Stats
from .poller import Discovery, Poller
from .position import EventCursor, EventCursorFile
from .stream import HubStream

__all__ = [
    "AuditReport",
    "CallbackReceiver",
    "ChangeEvent",
    "ChangeFilter",
    "ChangesNoLongerListed",
    "ChangesTrimmed",
    "Discovery",
    "DiscoveryError",
    "EventCursor",
    "EventCursorFile",
    "Follower",
    "Gap",
    "HubStream",
    "IntegrityError",
    "Mirror",
    "Poller",
    "PositionError",
    "PushUnavailable",
    "RepairReport",
    "SourceError",
    "Stats",
    "StreamClosed",
    "SubscriberError",
    "UnsafePathError",
]
