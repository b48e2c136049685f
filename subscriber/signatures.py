"""Checking a delivery's signature, either scheme the hub signs with, in constant time.

``websub`` is WebSub's ``X-Hub-Signature`` (the body alone: see :mod:`subscriber.websub`).
``standard-webhooks`` (https://www.standardwebhooks.com) signs ``"{webhook-id}.
{webhook-timestamp}.{body}"``: a delivery whose timestamp is further than ``tolerance``
seconds from now is refused, so a recorded delivery cannot be replayed later. During a
secret rotation the hub sends one ``v1,<base64>`` per secret, space-separated; any one that
matches a secret we hold is enough.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets as _secrets
import time
from collections.abc import Mapping, Sequence
from typing import Literal

from .websub import verify_signature

__all__ = ["DEFAULT_TOLERANCE", "Scheme", "new_secret", "sign_standard", "verify"]

Scheme = Literal["websub", "standard-webhooks"]
#: Seconds a Standard Webhooks timestamp may be off (either way), as the spec suggests.
DEFAULT_TOLERANCE = 300.0
_WHSEC = "whsec_"


def new_secret(scheme: Scheme) -> str:
    """A random secret: a ``whsec_`` one (base64 key) for Standard Webhooks."""
    if scheme == "standard-webhooks":
        return _WHSEC + base64.b64encode(_secrets.token_bytes(32)).decode()
    return _secrets.token_hex(32)


def _key(secret: str) -> bytes:
    if secret.startswith(_WHSEC):
        return base64.b64decode(secret[len(_WHSEC) :], validate=True)
    return secret.encode()


def sign_standard(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64 HMAC-SHA256>`` of ``"{msg_id}.{timestamp}.{body}"``."""
    signed = b"%s.%d.%s" % (msg_id.encode(), timestamp, body)
    return (
        "v1," + base64.b64encode(hmac.new(_key(secret), signed, hashlib.sha256).digest()).decode()
    )


def verify(
    scheme: Scheme,
    secrets: Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> bool:
    """Whether ``headers`` sign ``body`` with one of ``secrets`` under ``scheme``.

    ``headers`` must look names up case-insensitively (aiohttp's do).
    """
    if scheme == "websub":
        header = headers.get("X-Hub-Signature")
        return any(verify_signature(s, header, body) for s in secrets)
    msg_id = headers.get("webhook-id", "")
    stamp = headers.get("webhook-timestamp", "")
    given = headers.get("webhook-signature", "")
    if not msg_id or not given or not (stamp.isascii() and stamp.isdigit()) or len(stamp) > 12:
        return False
    timestamp = int(stamp)
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        return False
    offered = [
        value for version, _, value in (p.partition(",") for p in given.split()) if version == "v1"
    ]
    ok = False
    for secret in secrets:
        try:
            expected = sign_standard(secret, msg_id, timestamp, body)[3:]
        except (binascii.Error, ValueError):
            continue
        for value in offered:  # every comparison made: no early exit on a match
            ok |= hmac.compare_digest(expected.encode(), value.encode("ascii", "replace"))
    return ok
