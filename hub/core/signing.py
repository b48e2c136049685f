"""How a delivery is signed: WebSub's ``X-Hub-Signature`` or Standard Webhooks, sans I/O.

A subscription picks its scheme at subscribe (``hub.signature``). Standard Webhooks
(https://www.standardwebhooks.com) signs ``"{webhook-id}.{webhook-timestamp}.{body}"``, so
a receiver can refuse a replayed delivery by its timestamp; WebSub's header signs the body
alone. A secret rotated by a re-subscription stays in use for an overlap period: Standard
Webhooks carries both signatures (space-separated), ``X-Hub-Signature`` can carry only one,
so it keeps the previous secret until the overlap ends, then switches to the new one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from enum import StrEnum

from hub.core.exceptions import BadRequest

#: A Standard Webhooks secret: base64 of the key after this prefix.
WHSEC_PREFIX = "whsec_"
ID_HEADER = "webhook-id"
TIMESTAMP_HEADER = "webhook-timestamp"
SIGNATURE_HEADER = "webhook-signature"
WEBSUB_HEADER = "X-Hub-Signature"


class Scheme(StrEnum):
    #: ``X-Hub-Signature: sha256=<hex>`` (WebSub §7), the default.
    WEBSUB = "websub"
    #: ``webhook-id``, ``webhook-timestamp``, ``webhook-signature: v1,<base64>``.
    STANDARD_WEBHOOKS = "standard-webhooks"


def parse_scheme(text: str | None) -> Scheme:
    """``hub.signature`` as a :class:`Scheme`; absent or empty is the WebSub default."""
    if not text:
        return Scheme.WEBSUB
    try:
        return Scheme(text.strip().lower())
    except ValueError:
        raise BadRequest(
            f"hub.signature must be websub or standard-webhooks, got {text[:40]!r}"
        ) from None


def key(secret: str) -> bytes:
    """The HMAC key of ``secret``: a ``whsec_`` secret is base64 after its prefix, any
    other secret its UTF-8 bytes (as WebSub uses it)."""
    if secret.startswith(WHSEC_PREFIX):
        return base64.b64decode(secret[len(WHSEC_PREFIX) :], validate=True)
    return secret.encode()


def check_secret(secret: str) -> None:
    """400 naming ``hub.secret`` unless a ``whsec_`` secret holds a non-empty base64 key."""
    if not secret.startswith(WHSEC_PREFIX):
        return
    try:
        decoded = key(secret)
    except (binascii.Error, ValueError):
        raise BadRequest("hub.secret: a whsec_ secret must be base64 after the prefix") from None
    if not decoded:
        raise BadRequest("hub.secret: a whsec_ secret must hold a key after the prefix")


def websub_signature(secret: str, body: bytes) -> str:
    """WebSub §7: the ``X-Hub-Signature`` value, sha256 of the body alone."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def standard_signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<base64 HMAC-SHA256>`` of ``"{msg_id}.{timestamp}.{body}"``."""
    signed = b"%s.%d.%s" % (msg_id.encode(), timestamp, body)
    digest = hmac.new(key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def message_id(subscription: str, first_id: str, last_id: str) -> str:
    """A delivery's ``webhook-id``: the same for every retry of the same batch."""
    return f"msg_{subscription}_{first_id}_{last_id}"


def headers(
    scheme: Scheme,
    secrets: list[str],
    body: bytes,
    *,
    msg_id: str,
    timestamp: int,
) -> dict[str, str]:
    """The signature headers of one delivery attempt.

    ``secrets``: the secrets in force, newest first (two during a rotation's overlap).
    """
    if not secrets:
        return {}
    if scheme is Scheme.STANDARD_WEBHOOKS:
        signatures = " ".join(standard_signature(s, msg_id, timestamp, body) for s in secrets)
        return {
            ID_HEADER: msg_id,
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: signatures,
        }
    # One value only: the oldest secret in force (the subscriber may still verify with
    # it until the overlap ends).
    return {WEBSUB_HEADER: websub_signature(secrets[-1], body)}
