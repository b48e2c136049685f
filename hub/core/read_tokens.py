"""Signed read tokens: short-lived JWTs (HS256) that read the topics they name.

A site that serves browsers mints one per visitor (``rshub token``, or any JWT library with
the hub's ``RSHUB_JWT_KEY``) instead of handing out a long-lived read token: it names its
topics (claim ``topics``, a list of names, or of name prefixes followed by ``*``: ``pri*``
reads every topic whose name starts with ``pri``) and must expire (claim ``exp``, a number of
seconds since the epoch, at most ``jwt_max_ttl`` ahead). The hub accepts one wherever it
accepts a read token (:class:`hub.core.access.ReadAccess`). Only HS256 is accepted (never
``none``, never an algorithm the token picks), and every refusal says why.

A token is accepted until :data:`LEEWAY_SECONDS` after its ``exp`` (clocks differ between
the host that minted it and the hub): that instant is when the access it gives ends
(:attr:`Grant.ends_at`), on every transport.

PyJWT (and the cryptography it loads) is imported only by a hub with a key, when it makes
its :class:`SignedReadTokens`, or by ``mint``: ~50 ms that a hub without one does not pay at
start-up.
"""

from __future__ import annotations

import math
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hub.core.exceptions import Unauthorized
from hub.core.topic_patterns import TopicPatterns

if TYPE_CHECKING:
    import jwt

ALGORITHM = "HS256"
#: HS256 keys shorter than its hash (32 bytes) are weak (RFC 7518 §3.2).
MIN_KEY_BYTES = 32
#: Seconds of clock difference tolerated between the minting host and the hub.
LEEWAY_SECONDS = 10
#: Longest token the hub looks at (a JWT naming many topics stays far below).
MAX_TOKEN_BYTES = 8192
#: A ``jti`` a revocation may name (:mod:`hub.core.revocations`): visible ASCII without
#: spaces, as a token (a signed token with another one is still revoked by its
#: fingerprint).
JTI = re.compile(r"[\x21-\x7e]{1,256}")


def check_key(key: str) -> str:
    """``key`` if it is long enough to sign with (the message never shows the key)."""
    if len(key.encode()) < MIN_KEY_BYTES:
        raise ValueError(f"a JWT key must be at least {MIN_KEY_BYTES} bytes long")
    return key


def check_jti(jti: str) -> str:
    """``jti`` if a revocation can name it: 1-256 visible ASCII characters, no spaces."""
    if not JTI.fullmatch(jti):
        raise ValueError("a jti must be 1-256 visible ASCII characters, without spaces")
    return jti


def looks_signed(token: bytes) -> bool:
    """Shaped like a JWT (three dot-separated parts), so worth decoding."""
    return token.count(b".") == 2 and len(token) <= MAX_TOKEN_BYTES


def mint(
    key: str,
    topics: Iterable[str],
    ttl_seconds: float,
    now: float | None = None,
    *,
    jti: str | None = None,
) -> str:
    """A read token for ``topics`` that expires ``ttl_seconds`` from ``now``, with the id
    ``jti`` (default: 16 random hex digits), by which the hub's operator may revoke it
    (:mod:`hub.core.revocations`) without ever holding the token."""
    if ttl_seconds <= 0:
        raise ValueError("a read token's lifetime must be positive")
    names = sorted(set(topics))
    if not names:
        raise ValueError("a read token must name at least one topic")
    issued = int(time.time() if now is None else now)
    claims = {
        "topics": names,
        "iat": issued,
        "exp": issued + max(1, round(ttl_seconds)),
        "jti": secrets.token_hex(8) if jti is None else check_jti(jti),
    }
    import jwt

    return jwt.encode(claims, check_key(key), algorithm=ALGORITHM)


#: Verified tokens remembered (until they expire): decoding one costs ~100x a plain token
#: comparison, and a browser presents the same one on every request.
_REMEMBERED = 1024
#: Default of ``Settings.jwt_max_ttl``: a day.
DEFAULT_MAX_TTL_SECONDS = 86400.0


@dataclass(frozen=True, slots=True)
class Grant:
    """What a valid signed read token gives: its topics, until ``ends_at`` (epoch seconds:
    its ``exp`` plus the leeway, when the hub starts refusing it); ``jti``: its id, when it
    has one a revocation can name (a string, :data:`JTI`)."""

    topics: frozenset[str]
    ends_at: float
    jti: str | None = None
    #: The topics as names and name prefixes (an entry ``pri*`` reads every topic whose
    #: name starts with ``pri``; :mod:`hub.core.topic_patterns`).
    patterns: TopicPatterns = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "patterns", TopicPatterns.of(self.topics))


class SignedReadTokens:
    """Verifies signed read tokens with the hub's key."""

    def __init__(self, key: str, max_ttl: float = DEFAULT_MAX_TTL_SECONDS) -> None:
        import jwt  # at start-up, not at the first token (see the module's docstring)

        self._jwt = jwt
        self._key = check_key(key)
        self._max_ttl = max_ttl
        self._verified: OrderedDict[bytes, Grant] = OrderedDict()

    def __repr__(self) -> str:  # never the key
        return "SignedReadTokens(<key>)"

    def topics(self, token: bytes) -> frozenset[str]:
        """The topics a valid token reads; 401 naming what is wrong with any other."""
        return self.grant(token).topics

    def grant(self, token: bytes) -> Grant:
        """What a valid token gives; 401 naming what is wrong with any other."""
        now = time.time()
        known = self._verified.get(token)
        if known is not None and now < known.ends_at:
            return known
        jwt = self._jwt
        try:
            # exp is judged here, not by PyJWT: it takes "9999999999" and 1e30 as numbers.
            claims = jwt.decode(
                token,
                self._key,
                algorithms=[ALGORITHM],
                options={"require": ["exp"], "verify_exp": False},
                leeway=LEEWAY_SECONDS,
            )
        except jwt.PyJWTError as exc:
            raise Unauthorized(_problem(exc)) from None
        ends_at = self._end(claims["exp"], now)
        names = claims.get("topics")
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise Unauthorized("this read token has no 'topics' claim (a list of topic names)")
        jti = claims.get("jti")
        jti = jti if isinstance(jti, str) and JTI.fullmatch(jti) else None
        grant = self._verified[token] = Grant(frozenset(names), ends_at, jti)
        if len(self._verified) > _REMEMBERED:
            self._verified.popitem(last=False)
        return grant

    def _end(self, exp: object, now: float) -> float:
        """When a token with this ``exp`` stops being accepted; 401 naming the claim when it
        is not a number, is past, or lies further ahead than the hub's maximum lifetime."""
        value = math.nan
        if isinstance(exp, int | float) and not isinstance(exp, bool):
            try:
                value = float(exp)
            except OverflowError:  # an integer of hundreds of digits
                value = math.inf
        if math.isnan(value):
            shown = str(exp)[:20] if isinstance(exp, str | int | float) else ""
            raise Unauthorized(
                "this read token's 'exp' claim must be a number (seconds since the epoch), "
                f"not {type(exp).__name__} {shown!r}"
            )
        if now >= value + LEEWAY_SECONDS:
            raise Unauthorized("this read token has expired (its exp is past): get a new one")
        if value - now > self._max_ttl + LEEWAY_SECONDS:
            raise Unauthorized(
                f"this read token's 'exp' claim lies {value - now:.3g} s ahead, beyond the "
                f"hub's maximum lifetime of {self._max_ttl:g} s (RSHUB_JWT_MAX_TTL): mint "
                "one that expires sooner"
            )
        return value + LEEWAY_SECONDS


def _problem(exc: jwt.PyJWTError) -> str:
    """What is wrong with a token, for the client that sent it."""
    import jwt

    if isinstance(exc, jwt.ExpiredSignatureError):
        return "this read token has expired (its exp is past): get a new one"
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return f"this read token has no {exc.claim!r} claim: a signed read token must expire"
    if isinstance(exc, jwt.InvalidAlgorithmError):
        return f"this read token is not signed with {ALGORITHM} (the only algorithm accepted)"
    if isinstance(exc, jwt.InvalidSignatureError):
        return "this read token's signature does not match the hub's key"
    if isinstance(exc, jwt.ImmatureSignatureError):
        return "this read token is not valid yet (nbf or iat in the future)"
    reason = " ".join(str(exc).split())[:120]
    return f"this read token is not a valid JWT ({reason})"
