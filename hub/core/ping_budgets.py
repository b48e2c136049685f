"""Publish-ping budgets: each spent by whoever sends the pings.

A ping is counted once the hub knows whether it may be taken. An authorised ping spends its
publisher's budget (``ping_rate_per_second`` after a burst of ``ping_burst``): the token's
on a hub with publisher tokens, the client address's on an open hub, where the address is
all the hub knows of a publisher. A ping refused for its token (401/403) spends a small
budget of its own per client address (``ping_refusal_rate_per_second``,
``ping_refusal_burst``); beyond it the refusal is a 429. So no number of refused pings from
an address (behind one NAT, say) leaves an authorised publisher there with a 429.
"""

from __future__ import annotations

import hashlib

from hub.core.exceptions import TooManyRequests
from hub.core.settings import Settings
from hub.core.token_bucket import TokenBuckets

#: Buckets kept per budget; the oldest is forgotten beyond (it would be full again soon).
_KEYS = 10_000


class PingBudgets:
    """The authorised pings' budgets and the refused pings' (either may be unlimited)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._granted = _buckets(settings.ping_rate_per_second, settings.ping_burst)
        self._refused = _buckets(settings.ping_refusal_rate_per_second, settings.ping_refusal_burst)

    def granted(self, address: str, token: bytes | None, now: float) -> None:
        """Spend an authorised ping of the publisher holding ``token`` (None: an open hub's
        publisher, known by its ``address``); 429 beyond its budget."""
        if self._granted is None:
            return
        key = address if token is None else "token " + hashlib.sha256(token).hexdigest()
        wait = self._granted.take(key, now)
        if wait:
            raise TooManyRequests(
                f"too many publish pings from this publisher (over "
                f"{self.settings.ping_rate_per_second:g}/s after a burst of "
                f"{self.settings.ping_burst}): retry after the Retry-After seconds",
                retry_after=wait,
            )

    def refused(self, address: str, now: float) -> None:
        """Spend a ping from ``address`` refused for its token; 429 (instead of the
        refusal) beyond the refusals' budget."""
        if self._refused is None:
            return
        wait = self._refused.take(address, now)
        if wait:
            raise TooManyRequests(
                f"too many refused publish pings from this address (over "
                f"{self.settings.ping_refusal_rate_per_second:g}/s after a burst of "
                f"{self.settings.ping_refusal_burst}): send a valid token, or retry after "
                "the Retry-After seconds",
                retry_after=wait,
            )


def _buckets(rate: float, burst: int) -> TokenBuckets | None:
    return TokenBuckets(rate, burst, max_keys=_KEYS) if rate > 0 else None
