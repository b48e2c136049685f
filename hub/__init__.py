"""The rshub hub: ingest, store, deliver, stream and materialize ResourceSync changes.

The names below are the hub's public API. They are imported lazily (as ``websockets``
does), so ``import hub.events`` stays free of aiohttp and redis; see README "Architecture"
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
    "CallbackFailed": "exceptions",
    "ConfigurationError": "exceptions",
    "EmbeddedRedis": "embedded_redis",
    "Event": "events",
    "EventStore": "store",
    "HubError": "exceptions",
    "HubUrls": "topics",
    "RequestError": "exceptions",
    "Settings": "settings",
    "Subscription": "subscriptions",
    "create_app": "web_app",
    "run": "web_app",
}

if TYPE_CHECKING:
    from .embedded_redis import EmbeddedRedis
    from .events import Event
    from .exceptions import CallbackFailed, ConfigurationError, HubError, RequestError
    from .settings import Settings
    from .store import EventStore
    from .subscriptions import Subscription
    from .topics import HubUrls
    from .web_app import create_app, run


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hub' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
