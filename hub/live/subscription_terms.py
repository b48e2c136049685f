"""What a subscription asked of its deliveries: its filter, its rate limit, its signatures.

Read from the stored :class:`~hub.store.subscriptions.Subscription` once per worker (a
re-subscription or an admin change restarts the worker with the new record).
"""

from __future__ import annotations

import time

from hub.core import signing
from hub.core.events import Event, EventFilter
from hub.core.placement import subscription_id
from hub.core.settings import Settings
from hub.core.token_bucket import RateLimit
from hub.core.websub import SubscriptionRequest
from hub.store.subscriptions import Subscription


class Terms:
    def __init__(self, sub: Subscription, settings: Settings) -> None:
        self.sub = sub
        self.filter = event_filter(sub)
        self.rate_limit = rate_limit(sub, settings)

    def kept(self, events: list[Event]) -> list[Event]:
        """The events the subscription's filter lets through (all without one)."""
        if self.filter is None:
            return events
        accepts = self.filter.accepts
        return [e for e in events if accepts(e.fields)]


def signature_headers(
    sub: Subscription,
    body: bytes,
    batch: list[Event],
    now: float,
    *,
    sub_id: str | None = None,
    scheme: signing.Scheme | None = None,
) -> dict[str, str]:
    """``sub``'s signature headers (its scheme, its secrets in force) for ``batch`` as
    ``body``, signed at ``now`` (:class:`hub.live.delivery_posts.DeliveryPosts` puts them on
    every delivery and dead-letter replay)."""
    if not sub.secret:
        return {}
    secrets = [sub.secret]
    if sub.previous_secret and now < sub.previous_until:
        secrets.append(sub.previous_secret)
    if scheme is None:
        scheme = signing.Scheme(sub.signature)
    msg_id = ""  # only Standard Webhooks signs one (and says it)
    if scheme is signing.Scheme.STANDARD_WEBHOOKS:
        msg_id = signing.message_id(
            sub_id or subscription_id(sub.topic, sub.callback), batch[0].id, batch[-1].id
        )
    return signing.headers(scheme, secrets, body, msg_id=msg_id, timestamp=int(now))


def event_filter(sub: Subscription) -> EventFilter | None:
    if sub.filter_changes is None and not sub.filter_prefixes:
        return None
    changes = None if sub.filter_changes is None else frozenset(sub.filter_changes)
    return EventFilter(changes, tuple(sub.filter_prefixes))


def rate_limit(sub: Subscription, settings: Settings) -> RateLimit:
    """The admin's override, else the subscriber's ``hub.rate_limit``, else the default."""
    chosen = sub.admin_rate_limit or sub.rate_limit
    if chosen:
        return RateLimit(float(chosen[0]), int(chosen[1]))
    return RateLimit(settings.delivery_rate_per_second, settings.delivery_rate_burst)


def apply_terms(
    sub: Subscription, req: SubscriptionRequest, previous: Subscription | None, overlap: int
) -> None:
    """Set on ``sub`` (a verified (re-)subscription) the terms ``req`` asked for; keep an
    admin's rate limit, and the secret a changed ``hub.secret`` replaces for ``overlap`` s."""
    sub.signature = str(req.signature)
    if req.event_filter is not None:
        changes = req.event_filter.changes
        sub.filter_changes = None if changes is None else sorted(changes)
        sub.filter_prefixes = list(req.event_filter.prefixes)
    if req.rate_limit is not None:
        sub.rate_limit = [req.rate_limit.per_second, req.rate_limit.burst]
    if previous is None:
        return
    sub.admin_rate_limit = previous.admin_rate_limit
    now = time.time()
    if previous.secret and previous.secret != sub.secret and overlap > 0:
        sub.previous_secret, sub.previous_until = previous.secret, now + overlap
    elif previous.previous_secret and now < previous.previous_until:
        # A renewal during an overlap (same secret): the overlap runs on.
        sub.previous_secret = previous.previous_secret
        sub.previous_until = previous.previous_until
