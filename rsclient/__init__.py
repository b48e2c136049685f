"""Client-side plumbing shared by :mod:`publisher` and :mod:`subscriber`.

One implementation each of what both sides of rshub need to talk to a hub or a
ResourceSync Source: the server-sent-events parser (:mod:`rsclient.sse`), the crash-safe
state file (:mod:`rsclient.statefile`), the conditional-GET document client
(:mod:`rsclient.documents`) and the discovery walk from a Source Description down to its
Change Lists (:mod:`rsclient.discovery`). Errors: :mod:`rsclient.exceptions`. Like the
packages it serves, it never imports :mod:`hub`.
"""

from .discovery import Discovery, Notification, discover
from .documents import DocumentClient, Fetched, Validators
from .exceptions import (
    DiscoveryError,
    EventStreamError,
    RsClientError,
    SourceError,
    StateFileError,
)
from .sse import Event, EventParser, event_batches
from .statefile import StateFile, write_atomically

__all__ = [
    "Discovery",
    "DiscoveryError",
    "DocumentClient",
    "Event",
    "EventParser",
    "EventStreamError",
    "Fetched",
    "Notification",
    "RsClientError",
    "SourceError",
    "StateFile",
    "StateFileError",
    "Validators",
    "discover",
    "event_batches",
    "write_atomically",
]
