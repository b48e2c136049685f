"""A subscription's delivery terms as operators read them, never a secret.

One shape for ``GET /admin/subscriptions`` and the rate-limit answers
(:mod:`hub.web.rate_limits`): the signature scheme, whether a rotated-out secret still
signs and until when, the filter, the rate limit in force and where it comes from, the
strikes toward suspension and when it was disabled.
"""

from __future__ import annotations

from aiohttp import web

from hub.core.settings import Settings
from hub.live.subscription_terms import rate_limit
from hub.store.subscriptions import Subscription

#: The settings the rate limit in force falls back on (set by :func:`hub.web.app.create_app`).
SETTINGS = web.AppKey("rate_limit_settings", Settings)


def rate_limit_in_force(sub: Subscription, settings: Settings) -> dict[str, object]:
    """``per_second``, ``burst`` and ``source``: ``admin``, ``subscriber`` or ``default``."""
    limit = rate_limit(sub, settings)
    source = "admin" if sub.admin_rate_limit else "subscriber" if sub.rate_limit else "default"
    return {"per_second": limit.per_second, "burst": limit.burst, "source": source}


def terms(sub: Subscription, settings: Settings, now: float) -> dict[str, object]:
    rotating = bool(sub.previous_secret) and now < sub.previous_until
    return {
        "signature": sub.signature,
        "previous_secret": rotating,
        "previous_secret_until": sub.previous_until if rotating else None,
        "filter": None
        if sub.filter_changes is None and not sub.filter_prefixes
        else {"changes": sub.filter_changes, "prefixes": list(sub.filter_prefixes)},
        "rate_limit": rate_limit_in_force(sub, settings),
        "strikes": sub.strikes,
        "disabled_at": sub.disabled_at or None,
    }
