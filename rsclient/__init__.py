"""Client-side plumbing shared by :mod:`publisher` and :mod:`subscriber`.

One implementation each of what both sides of rshub need to talk to a hub or a
ResourceSync Source: the server-sent-events parser (:mod:`rsclient.sse`), the crash-safe
state file (:mod:`rsclient.statefile`), the conditional-GET document client
(:mod:`rsclient.documents`), the discovery walk from a Source Description down to its
Change Lists (:mod:`rsclient.discovery`) and the back-off policy and retrying loop
(:mod:`rsclient.backoff`, which the hub uses too). Errors: :mod:`rsclient.exceptions`.
Like the packages it serves, it never imports :mod:`hub`.

The names below are imported lazily (as :mod:`hub`'s are), so ``import rsclient.backoff``
stays free of aiohttp.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "Backoff",
    "Discovery",
    "DiscoveryError",
    "DocumentClient",
    "Event",
    "EventParser",
    "EventStreamError",
    "Fetched",
    "Notification",
    "Retrier",
    "RsClientError",
    "SourceError",
    "StateFile",
    "StateFileError",
    "Validators",
    "discover",
    "event_batches",
    "parse_retry_after",
    "write_atomically",
]

_LAZY = {
    "Backoff": "backoff",
    "Discovery": "discovery",
    "DiscoveryError": "exceptions",
    "DocumentClient": "documents",
    "Event": "sse",
    "EventParser": "sse",
    "EventStreamError": "exceptions",
    "Fetched": "documents",
    "Notification": "discovery",
    "Retrier": "backoff",
    "RsClientError": "exceptions",
    "SourceError": "exceptions",
    "StateFile": "statefile",
    "StateFileError": "exceptions",
    "Validators": "documents",
    "discover": "discovery",
    "event_batches": "sse",
    "parse_retry_after": "backoff",
    "write_atomically": "statefile",
}

if TYPE_CHECKING:
    from .backoff import Backoff, Retrier, parse_retry_after
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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rsclient' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
