"""The rshub hub: ingest, store, deliver, stream and materialize ResourceSync changes.

The names below are the hub's public API. They are imported lazily (as ``websockets``
does), so ``import hub.core.events`` stays free of aiohttp and redis; see README "Architecture"
for the layers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "CallbackFailed",
    "ConfigurationError",
    "EmbeddedRedis",
    "Event",
    "EventStore",
    "HubError",
    "HubUrls",
    "RequestError",
    "Settings",
    "Subscription",
    "__version__",
    "create_app",
    "run",
]

_LAZY = {
    "CallbackFailed": "core.exceptions",
    "ConfigurationError": "core.exceptions",
    "EmbeddedRedis": "store.embedded_redis",
    "Event": "core.events",
    "EventStore": "store.event_store",
    "HubError": "core.exceptions",
    "HubUrls": "core.topics",
    "RequestError": "core.exceptions",
    "Settings": "core.settings",
    "Subscription": "store.subscriptions",
    "create_app": "web.app",
    "run": "web.app",
}

if TYPE_CHECKING:
    from hub.core.events import Event
    from hub.core.exceptions import CallbackFailed, ConfigurationError, HubError, RequestError
    from hub.core.settings import Settings
    from hub.core.topics import HubUrls
    from hub.store.embedded_redis import EmbeddedRedis
    from hub.store.event_store import EventStore
    from hub.store.subscriptions import Subscription
    from hub.web.app import create_app, run


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hub' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
