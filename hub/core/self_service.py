"""A subscriber reading its own subscription's record, without the admin token.

It signs the request with the subscription's ``hub.secret`` (the key it already shares
with the hub for ``X-Hub-Signature``): ``X-RSHub-Timestamp: <unix seconds>`` and
``X-RSHub-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>\\n<path>")>``
(:func:`rsclient.subscription_identity.record_signature`, the one implementation the
clients use too). A timestamp further than the tolerance from the hub's clock is refused
(an old signature cannot be replayed later), and the caller refuses a signature it has
accepted before (:mod:`hub.store.used_signatures`), so a captured one cannot be replayed
within the window either. The comparison is constant-time. A subscription without a
secret has nothing to sign with: only the admin token reads it.
"""

from __future__ import annotations

import hashlib
import hmac
import re

from hub.core.exceptions import Forbidden, Unauthorized
from rsclient.subscription_identity import (
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    record_signature,
)

__all__ = ["SIGNATURE_HEADER", "TIMESTAMP_HEADER", "check", "signed"]

_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_SIGNATURE = re.compile(r"sha256=[0-9a-f]{64}")


def signed(timestamp: str | None, signature: str | None) -> bool:
    """The request tries self-service (carries either header)."""
    return timestamp is not None or signature is not None


def _shown(value: str) -> str:
    return repr(value[:40]) + ("..." if len(value) > 40 else "")


def check(
    secret: str | None,
    path: str,
    timestamp: str | None,
    signature: str | None,
    *,
    now: float,
    tolerance: float,
) -> str:
    """Raise 401/403 naming what is wrong; return a digest naming the signature (for the
    replay check) when it is good."""
    if not secret:
        raise Forbidden(
            "this subscription has no hub.secret, so it cannot sign for its record: "
            "only the admin token may read it"
        )
    if timestamp is None or signature is None:
        missing = TIMESTAMP_HEADER if timestamp is None else SIGNATURE_HEADER
        raise Unauthorized(
            f"missing {missing}: send {TIMESTAMP_HEADER} (unix seconds) and "
            f"{SIGNATURE_HEADER} (sha256=<hex HMAC-SHA256 of '<timestamp>\\n<path>' keyed "
            "with hub.secret)"
        )
    if not _TIMESTAMP.fullmatch(timestamp):
        raise Unauthorized(f"{TIMESTAMP_HEADER} must be unix seconds, got {_shown(timestamp)}")
    if not _SIGNATURE.fullmatch(signature):
        raise Unauthorized(
            f"{SIGNATURE_HEADER} must be sha256=<64 lowercase hex digits>, got {_shown(signature)}"
        )
    skew = int(timestamp) - now
    if skew < -tolerance:
        raise Unauthorized(
            f"the signature expired: {TIMESTAMP_HEADER} is {-skew:.0f} s old, more than the "
            f"{tolerance:.0f} s allowed; sign the request anew"
        )
    if skew > tolerance:
        raise Unauthorized(
            f"{TIMESTAMP_HEADER} is {skew:.0f} s in the future, more than the "
            f"{tolerance:.0f} s allowed; check this machine's clock"
        )
    expected = record_signature(secret, int(timestamp), path)
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        raise Forbidden(
            f"{SIGNATURE_HEADER} does not match: sign '<timestamp>\\n{path}' with the "
            "subscription's hub.secret"
        )
    return hashlib.sha256(signature.encode()).hexdigest()
