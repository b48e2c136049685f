"""A WebSub subscription's stable id and how its subscriber signs a request for its record.

Shared by the hub (which names subscriptions by this id and checks the signatures, see
:mod:`hub.core.self_service`) and the clients (``rshub inspect`` computes the id of a
topic and callback and signs with the subscription's ``hub.secret``): one implementation,
so the two can never disagree.
"""

from __future__ import annotations

import hashlib
import hmac

#: Headers of a signed request for a subscription's own record.
TIMESTAMP_HEADER = "X-RSHub-Timestamp"
SIGNATURE_HEADER = "X-RSHub-Signature"


def subscription_id(topic: str, callback: str) -> str:
    """A short, stable name for a subscription that does not reveal its callback URL.

    For series labels and listings read by people who must not see the callback (its
    query string often carries a key): the first 12 hex digits of SHA-256 of
    ``topic``, NUL, ``callback``. Operators match it to a callback in the admin API.
    """
    return hashlib.sha256(f"{topic}\0{callback}".encode()).hexdigest()[:12]


def record_signature(secret: str, timestamp: int, path: str) -> str:
    """The ``X-RSHub-Signature`` value: ``sha256=`` and the hex HMAC-SHA256, keyed with the
    subscription's ``hub.secret``, of ``"<timestamp>\\n<path>"`` (unix seconds, the request
    path without query)."""
    message = f"{timestamp}\n{path}".encode()
    return "sha256=" + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def signed_headers(secret: str, timestamp: int, path: str) -> dict[str, str]:
    """Both headers of a signed request for ``path`` at ``timestamp``."""
    return {
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: record_signature(secret, timestamp, path),
    }
