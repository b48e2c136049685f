"""Revoked tokens: which credentials the hub refuses now, as plain data.

Tokens and topic grants are settings, fixed for the life of a hub process; a revocation
takes one back while the hub runs. It names a token by its **fingerprint**, the SHA-256 of
its bytes in hex, or a signed read token (:mod:`hub.core.read_tokens`) by its ``jti``
claim, and applies to every topic or to one (that topic's grant removed, the token's
others kept). The token itself is never stored, shown or logged: a revocation is all three.

The admin API makes and lifts revocations (:mod:`hub.web.revocations`), Redis keeps them
(:mod:`hub.store.revocations`), and every hub process holds the current set in one
:class:`Revocations`, which its runtime refreshes (:mod:`hub.live.runtime`). The checks
that accept a read or publisher token (:class:`hub.core.access.ReadAccess`,
:class:`hub.core.auth.PublisherAuth`) ask it. The admin and metrics tokens are not
revocable: they are the operator's own, changed by a restart.

A guessable token has a guessable fingerprint: the fingerprint hides a random token, not a
weak one (which the hub's checks would not protect either).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from hub.core.exceptions import BadRequest, TokenRevoked
from hub.core.read_tokens import JTI, LEEWAY_SECONDS
from hub.core.topics import check_name

#: A fingerprint: SHA-256, 64 lowercase hex digits.
FINGERPRINT = re.compile(r"[0-9a-f]{64}")
#: Most revocations the hub keeps: every process holds them all, and checks a token
#: against them in constant time, but a runaway script must not fill its memory.
MAX_REVOCATIONS = 10_000
#: Hex digits of a fingerprint a refusal shows: enough to tell tokens apart.
SHOWN_DIGITS = 12
#: The topic field of a revocation for every topic (no topic name contains ``*``).
EVERY_TOPIC = "*"


def fingerprint(token: bytes | str) -> str:
    """The SHA-256 of ``token``, in hex: how the hub names a token it must not show."""
    return hashlib.sha256(token.encode() if isinstance(token, str) else token).hexdigest()


class Kind(StrEnum):
    """What a revocation names a token by."""

    #: The SHA-256 of the token (static or signed).
    FINGERPRINT = "fingerprint"
    #: A signed read token's ``jti`` claim.
    JTI = "jti"


@dataclass(frozen=True, slots=True)
class Credential:
    """What a request's token is known by, for revocation: its fingerprint, and a signed
    read token's ``jti`` (None for a static token, or a signed one without)."""

    fingerprint: str
    jti: str | None = None

    @classmethod
    def of(cls, token: bytes, jti: str | None = None) -> Credential:
        return cls(fingerprint(token), jti)

    def names(self) -> Iterator[tuple[Kind, str]]:
        yield Kind.FINGERPRINT, self.fingerprint
        if self.jti is not None:
            yield Kind.JTI, self.jti

    @property
    def shown(self) -> str:
        """How a refusal names the token."""
        return f"fingerprint {self.fingerprint[:SHOWN_DIGITS]}"


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True, slots=True)
class Revocation:
    """One token (by fingerprint or jti) refused for every topic (``topic`` None) or for one."""

    kind: Kind
    value: str
    topic: str | None = None
    #: When it was revoked (epoch seconds).
    revoked_at: float = 0.0
    #: When it stops applying (epoch seconds; None: never). A signed read token's own
    #: expiry makes the revocation of it pointless after that, so that is its default.
    expires_at: float | None = None

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    @property
    def key(self) -> tuple[Kind, str, str | None]:
        return (self.kind, self.value, self.topic)

    @property
    def field(self) -> str:
        """Its Redis hash field: kind, value and topic, space-separated (none holds one)."""
        return f"{self.kind} {self.value} {self.topic or EVERY_TOPIC}"

    @classmethod
    def from_field(
        cls, field: str, revoked_at: float = 0.0, expires_at: float | None = None
    ) -> Revocation:
        """The revocation a hash field names; ValueError for one the hub did not write."""
        kind_text, value, topic = field.split(" ")  # ValueError unless three parts
        kind = Kind(kind_text)
        pattern = FINGERPRINT if kind is Kind.FINGERPRINT else JTI
        if not pattern.fullmatch(value):
            raise ValueError(f"not a {kind}: {value[:80]!r}")
        return cls(kind, value, None if topic == EVERY_TOPIC else topic, revoked_at, expires_at)

    def public(self) -> dict[str, object]:
        """As the admin API shows it (a fingerprint, never a token)."""
        return {
            "fingerprint": self.value if self.kind is Kind.FINGERPRINT else None,
            "jti": self.value if self.kind is Kind.JTI else None,
            "topic": self.topic,
            "revoked_at": self.revoked_at,
            "revoked": _iso(self.revoked_at),
            "expires_at": self.expires_at,
            "expires": None if self.expires_at is None else _iso(self.expires_at),
        }


class Revocations:
    """The revocations in force, as this process last read them: what every token check
    asks. Replaced whole (:meth:`replace`) when Redis holds a newer set."""

    def __init__(self) -> None:
        #: The store's version of the set held (None: never read).
        self.version: int | None = None
        self.records: tuple[Revocation, ...] = ()
        self._everywhere: frozenset[tuple[Kind, str]] = frozenset()
        self._topics: dict[tuple[Kind, str], frozenset[str]] = {}
        self._next_expiry: float | None = None

    def __bool__(self) -> bool:
        """Any revocation at all (most hubs: none, and no check costs anything)."""
        return bool(self.records)

    def __len__(self) -> int:
        return len(self.records)

    @property
    def next_expiry(self) -> float | None:
        """When the first revocation held stops applying (None: none expires)."""
        return self._next_expiry

    def drop_expired(self, now: float) -> int:
        """Stop applying the revocations expired by ``now`` (the store forgets them at its
        next change); how many were dropped. The version stays: it is the store's."""
        if self._next_expiry is None or self._next_expiry > now:
            return 0
        kept = [r for r in self.records if not r.expired(now)]
        dropped = len(self.records) - len(kept)
        self.replace(kept, self.version if self.version is not None else 0)
        return dropped

    def replace(self, records: Iterable[Revocation], version: int) -> None:
        kept = tuple(sorted(records, key=lambda r: (r.revoked_at, r.field)))
        everywhere = set()
        topics: dict[tuple[Kind, str], set[str]] = {}
        for record in kept:
            name = (record.kind, record.value)
            if record.topic is None:
                everywhere.add(name)
            else:
                topics.setdefault(name, set()).add(record.topic)
        self.records, self.version = kept, version
        expiries = [r.expires_at for r in kept if r.expires_at is not None]
        self._next_expiry = min(expiries) if expiries else None
        self._everywhere = frozenset(everywhere)
        self._topics = {name: frozenset(names) for name, names in topics.items()}

    def check(self, credential: Credential, topic: str | None) -> None:
        """Raise :class:`TokenRevoked` when ``credential`` is revoked for ``topic`` (None:
        only a revocation for every topic counts: a hub-wide use, such as the overview)."""
        if not self.records:
            return
        for name in credential.names():
            if name in self._everywhere:
                raise TokenRevoked(
                    f"this token was revoked ({credential.shown}): ask the hub's operator "
                    "for another"
                )
            if topic is not None and topic in self._topics.get(name, ()):
                raise TokenRevoked(
                    f"this token was revoked for topic {topic!r} ({credential.shown}): ask "
                    "the hub's operator for another"
                )

    def refuses(self, credential: Credential, topic: str | None) -> bool:
        try:
            self.check(credential, topic)
        except TokenRevoked:
            return True
        return False

    def revoked_topics(self, credential: Credential) -> frozenset[str] | None:
        """The topics ``credential`` is revoked for; None: every topic."""
        out: frozenset[str] = frozenset()
        for name in credential.names():
            if name in self._everywhere:
                return None
            out |= self._topics.get(name, frozenset())
        return out


# -- what a request to revoke or lift names ---------------------------------------------------

#: What ``Authorization: Bearer`` can carry (as the settings' token rule): a token to
#: fingerprint is one the hub could have been given.
_TOKEN = re.compile(r"[\x21-\x7e]{1,4096}")
#: The fields a revocation request may have; any other is refused, so that a misspelt
#: ``topic`` never revokes a token for every topic.
FIELDS = ("token", "fingerprint", "jti", "topic", "expires")
_NAMED_BY = ("token", "fingerprint", "jti")


def requested(fields: Mapping[str, object], revoked_at: float = 0.0) -> Revocation:
    """The revocation a request names: exactly one of ``token`` (fingerprinted here; the
    token goes no further), ``fingerprint`` (64 hex digits) or ``jti``, and ``topic`` for
    that topic only (absent: every topic). Raises :class:`BadRequest` naming the field.
    """
    unknown = sorted(name for name in fields if name not in FIELDS)
    if unknown:
        shown = ", ".join(repr(name[:40]) for name in unknown[:5])
        raise BadRequest(
            f"unknown field {shown}: a revocation takes token, fingerprint or jti, topic "
            "and expires",
            field=unknown[0][:40],
        )
    for name, value in fields.items():
        if not isinstance(value, str):
            raise BadRequest(
                f"field {name!r} must be a string, not {type(value).__name__}", field=name
            )
    given = [name for name in _NAMED_BY if name in fields]
    if len(given) != 1:
        raise BadRequest(
            "name the token by exactly one of token, fingerprint (its SHA-256, 64 hex digits) "
            f"or jti (a signed read token's id); got {', '.join(given) or 'none'}"
        )
    name = given[0]
    value = str(fields[name]).strip()
    if name == "token":
        if not _TOKEN.fullmatch(value):
            raise BadRequest(
                "a token is 1-4096 visible ASCII characters, without spaces", field="token"
            )
        kind, value = Kind.FINGERPRINT, fingerprint(value)
    elif name == "fingerprint":
        value = value.lower()
        if not FINGERPRINT.fullmatch(value):
            raise BadRequest(
                "a fingerprint is the token's SHA-256 in hex: 64 hex digits "
                "(sha256sum, or rshub token revoke TOKEN, computes it)",
                field="fingerprint",
            )
        kind = Kind.FINGERPRINT
    else:
        if not JTI.fullmatch(value):
            raise BadRequest(
                "a jti is 1-256 visible ASCII characters, without spaces (revoke a token "
                "with another jti by its fingerprint)",
                field="jti",
            )
        kind = Kind.JTI
    topic = fields.get("topic")
    try:
        only = None if topic is None else check_name(str(topic).strip())
    except BadRequest as exc:
        raise BadRequest(f"topic: {exc.message}", field="topic") from None
    if "expires" in fields:
        expires_at: float | None = _expires(str(fields["expires"]).strip(), revoked_at)
    else:
        expires_at = token_expiry(str(fields[name]).strip()) if name == "token" else None
    return Revocation(kind, value, only, revoked_at, expires_at)


def _expires(text: str, now: float) -> float:
    """An ``expires`` field: an ISO 8601 time with its offset (``Z`` for UTC), later than
    ``now``. A time without an offset is refused: a revocation that ends an hour early or
    late, by the reader's time zone, is worse than none."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise BadRequest(
            "expires must be an ISO 8601 time with its offset, such as "
            f"2027-01-01T00:00:00Z, not {text[:40]!r}",
            field="expires",
        ) from None
    if when.tzinfo is None:
        raise BadRequest(
            "expires needs its offset (Z for UTC, or +01:00): without one the time is ambiguous",
            field="expires",
        )
    at = when.timestamp()
    if at <= now:
        raise BadRequest(
            f"expires {text[:40]!r} is not in the future: the revocation would end before it began",
            field="expires",
        )
    return at


def token_expiry(token: str) -> float | None:
    """When a signed read token stops being accepted anyway (its ``exp`` plus the leeway),
    read without its signature: the revocation needs no longer life than that. Nothing
    for a static token or one without a numeric ``exp``: its revocation never expires.
    A forged ``exp`` costs nothing: a token that does not verify is refused regardless."""
    if token.count(".") != 2:
        return None
    import jwt  # as hub.core.read_tokens does: not at start-up

    try:
        exp = jwt.decode(token, options={"verify_signature": False}).get("exp")
    except (jwt.PyJWTError, ValueError, AttributeError):
        return None
    if not isinstance(exp, int | float) or isinstance(exp, bool) or not math.isfinite(exp):
        return None
    return float(exp) + LEEWAY_SECONDS
