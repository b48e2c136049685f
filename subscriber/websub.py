"""WebSub (W3C, 2018) subscriber rules, sans I/O: request forms, verification, signatures."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

__all__ = [
    "SIGNATURE_ALGORITHMS",
    "sign",
    "subscription_form",
    "verification_answer",
    "verify_signature",
]

#: ``X-Hub-Signature`` methods WebSub allows (§8) and their hashlib names.
SIGNATURE_ALGORITHMS = {"sha1": "sha1", "sha256": "sha256", "sha384": "sha384", "sha512": "sha512"}


def subscription_form(
    mode: str,
    *,
    topic: str,
    callback: str,
    secret: str | None = None,
    lease_seconds: int | None = None,
    since: str | None = None,
    signature: str | None = None,
    rate_limit: str | None = None,
) -> dict[str, str]:
    """The form body of a (un)subscription request (WebSub §5.1).

    rshub extensions: ``hub.since`` (start deliveries after that event id),
    ``hub.signature`` (``websub`` or ``standard-webhooks``) and ``hub.rate_limit``
    (``<deliveries per second>[,<burst>]``); the filter's fields repeat, see
    :meth:`subscriber.filters.ChangeFilter.fields`.
    """
    form = {"hub.mode": mode, "hub.topic": topic, "hub.callback": callback}
    if mode == "subscribe":
        if secret is not None:
            form["hub.secret"] = secret
        if lease_seconds is not None:
            form["hub.lease_seconds"] = str(lease_seconds)
        if since is not None:
            form["hub.since"] = since
        if signature is not None:
            form["hub.signature"] = signature
        if rate_limit is not None:
            form["hub.rate_limit"] = rate_limit
    return form


def sign(secret: str, body: bytes, algorithm: str = "sha256") -> str:
    """The ``X-Hub-Signature`` value a hub sends for ``body``."""
    digest = hmac.new(secret.encode(), body, SIGNATURE_ALGORITHMS[algorithm]).hexdigest()
    return f"{algorithm}={digest}"


def verify_signature(secret: str, header: str | None, body: bytes) -> bool:
    """Whether ``header`` is a valid signature of ``body`` (WebSub §8), in constant time."""
    if not header:
        return False
    method, sep, value = header.partition("=")
    algorithm = SIGNATURE_ALGORITHMS.get(method.strip().lower())
    if not sep or algorithm is None:
        return False
    expected = hmac.new(secret.encode(), body, algorithm).hexdigest()
    return hmac.compare_digest(expected, value.strip().lower())


def verification_answer(query: Mapping[str, str], *, topic: str, wanted: set[str]) -> str | None:
    """The body to answer a verification GET with, or ``None`` to refuse it (404).

    ``wanted`` holds the modes we asked for on ``topic`` (``subscribe``, ``unsubscribe``).
    """
    mode = query.get("hub.mode")
    challenge = query.get("hub.challenge")
    if query.get("hub.topic") != topic or mode not in wanted or not challenge:
        return None
    return challenge
