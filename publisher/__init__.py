"""Publisher: push ResourceSync change notifications to an rshub hub.

The library: :class:`Publisher` (asyncio) and :class:`BlockingPublisher` (scripts) queue
typed changes (:func:`make_change`, or any :class:`resourcesync.Entry`), batch them
(:class:`BatchPolicy`), POST them to ``{hub}/topics/{topic}`` and retry with back-off and
an ``Idempotency-Key`` (:class:`RetryPolicy`). The adapters built on it: the Wikimedia
edit feed (:mod:`publisher.wikipedia`, :mod:`publisher.editfeed`) and the pull-to-push
bridge (:mod:`publisher.bridge`). Errors: :mod:`publisher.exceptions`.
"""

from .batching import BatchPolicy
from .blocking import BlockingPublisher
from .changes import make_change, notification
from .client import Publisher, PublishResult
from .exceptions import (
    FeedError,
    HubUnavailable,
    PublisherError,
    PublishFailed,
    PublishRejected,
    QueueFullError,
    SourceError,
    StateError,
    UnsentChangesError,
    UsageError,
)
from .retry import RetryPolicy

__all__ = [
    "BatchPolicy",
    "BlockingPublisher",
    "FeedError",
    "HubUnavailable",
    "PublishFailed",
    "PublishRejected",
    "PublishResult",
    "Publisher",
    "PublisherError",
    "QueueFullError",
    "RetryPolicy",
    "SourceError",
    "StateError",
    "UnsentChangesError",
    "UsageError",
    "make_change",
    "notification",
]
