"""Who may read which topic, and who may operate the hub: bearer tokens, as plain data.

Reading is open by default. Global read tokens make every topic private; per-topic read
tokens make that topic private. A private topic is readable with a global read token, one
of its own read tokens, a token that may publish to it (a publisher reads what it writes),
or a signed read token naming it (:mod:`hub.core.read_tokens`). The admin API has a token of
its own; without one, only loopback clients of an open hub may use it (the web layer knows
the peer; :meth:`OperatorAccess.check` is told).
``/metrics`` may have a token of its own too (:class:`MetricsAccess`).

A token the operator revoked (:mod:`hub.core.revocations`), for every topic or for the one
asked about, reads nothing it would otherwise read: 403 naming the revocation.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass

from hub.core.exceptions import Forbidden, Unauthorized
from hub.core.read_tokens import SignedReadTokens, looks_signed
from hub.core.revocations import Credential, Revocations
from hub.core.settings import Settings


def bearer(authorization: str | None, what: str) -> bytes:
    """The token of ``Authorization: Bearer <token>``; 401 naming ``what`` needs it."""
    if not authorization:
        raise Unauthorized(f"{what} needs 'Authorization: Bearer <token>'")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("Authorization must be 'Bearer <token>'")
    return token.strip().encode()


def given_token(authorization: str | None) -> bytes | None:
    """The bearer token of ``authorization``, or None when there is none (no error)."""
    try:
        return bearer(authorization, "")
    except Unauthorized:
        return None


def matches(given: bytes, candidates: list[bytes]) -> bool:
    """Compare against every candidate, so timing does not reveal which one matched."""
    ok = False
    for candidate in candidates:
        ok |= hmac.compare_digest(given, candidate)
    return ok


def _encoded(tokens: list[str]) -> list[bytes]:
    return [t.encode() for t in tokens]


@dataclass(frozen=True, slots=True)
class ReadGrant:
    """What a request reads a topic with: when that access ends (a signed read token's end,
    epoch seconds; None: it does not), and the token that gives it (None: the topic is
    open, no token needed), by which a revocation ends it."""

    ends_at: float | None = None
    credential: Credential | None = None


#: An open topic's grant: no token, no end.
OPEN = ReadGrant()


class ReadAccess:
    """Who may read which topic (documents, streams, WebSub subscriptions)."""

    def __init__(self, settings: Settings, revocations: Revocations | None = None) -> None:
        #: The revocations in force (shared with the publisher check; the runtime keeps
        #: them current).
        self.revocations = Revocations() if revocations is None else revocations
        self.all_private = bool(settings.read_tokens)
        self.private_topics = frozenset(settings.topic_read_tokens)
        #: Tokens that read every topic: global read tokens and global publisher tokens.
        self.global_tokens = _encoded(settings.read_tokens) + _encoded(settings.tokens)
        self.topic_tokens: dict[str, list[bytes]] = {}
        for name in set(settings.topic_read_tokens) | set(settings.topic_tokens):
            self.topic_tokens[name] = _encoded(
                settings.topic_read_tokens.get(name, []) + settings.topic_tokens.get(name, [])
            )
        key = settings.jwt_key
        self.signed: SignedReadTokens | None = None
        if key is not None:
            self.signed = SignedReadTokens(key.get_secret_value(), settings.jwt_max_ttl)

    def is_open(self, topic: str) -> bool:
        """True when ``topic`` is readable without a token."""
        return not self.all_private and topic not in self.private_topics

    def check(self, topic: str, authorization: str | None) -> float | None:
        """Raise 401/403 unless ``authorization`` may read ``topic``. Else when that access
        ends (epoch seconds): a signed read token's end; None when it does not end."""
        return self.grant(topic, authorization).ends_at

    def grant(self, topic: str, authorization: str | None) -> ReadGrant:
        """Raise 401/403 unless ``authorization`` may read ``topic`` (403 for a revoked
        token); else what it reads it with (:class:`ReadGrant`)."""
        if self.is_open(topic):
            return OPEN
        given = bearer(authorization, f"topic {topic!r} is private: reading it")
        credential = Credential.of(given)
        revocations = self.revocations
        revocations.check(credential, topic)
        if matches(given, self.global_tokens + self.topic_tokens.get(topic, [])):
            return ReadGrant(None, credential)
        if self.signed is not None and looks_signed(given):
            grant = self.signed.grant(given)  # 401 naming what is wrong with it
            if grant.jti is not None:
                credential = Credential(credential.fingerprint, grant.jti)
                revocations.check(credential, topic)
            names = grant.topics
            if topic in names:
                return ReadGrant(grant.ends_at, credential)
            shown = ", ".join(repr(n) for n in sorted(names)[:10])
            raise Forbidden(f"this read token is for topics {shown}, not {topic!r}")
        raise Forbidden(f"this token may not read topic {topic!r}")

    def sight(self, authorization: str | None) -> Callable[[str], bool]:
        """Which topics ``authorization`` may read, decided once for a whole listing.

        One pass over the configured tokens, however many topics are then asked about:
        a scrape of ``/metrics`` must not cost a token comparison per topic.
        """
        given = given_token(authorization)
        revoked: frozenset[str] = frozenset()
        if given is not None and self.revocations:
            credential = Credential.of(given, self._signed_jti(given))
            topics = self.revocations.revoked_topics(credential)
            if topics is None:  # revoked everywhere: it reads what no token does
                given = None
            else:
                revoked = topics
        if given is not None and matches(given, self.global_tokens):
            return lambda topic: topic not in revoked
        mine = (
            frozenset(
                name
                for name, tokens in self.topic_tokens.items()
                if given is not None and matches(given, tokens)
            )
            | self._signed_topics(given)
        ) - revoked
        return lambda topic: topic in mine or self.is_open(topic)

    def _signed_topics(self, given: bytes | None) -> frozenset[str]:
        if self.signed is None or given is None or not looks_signed(given):
            return frozenset()
        try:
            return self.signed.topics(given)
        except Unauthorized:
            return frozenset()

    def _signed_jti(self, given: bytes) -> str | None:
        if self.signed is None or not looks_signed(given):
            return None
        try:
            return self.signed.grant(given).jti
        except Unauthorized:
            return None

    def readable(self, topic: str, authorization: str | None) -> bool:
        """Whether ``authorization`` may read ``topic`` (no error: for listings)."""
        try:
            self.check(topic, authorization)
        except (Unauthorized, Forbidden):
            return False
        return True


class OperatorAccess:
    """Who may use the admin API."""

    def __init__(self, settings: Settings, *, hub_open: bool) -> None:
        self.token = settings.admin_token.encode() if settings.admin_token else None
        self.hub_open = hub_open

    def admits(self, authorization: str | None) -> bool:
        """True when ``authorization`` carries the admin token (one is configured)."""
        given = given_token(authorization)
        return self.token is not None and given is not None and matches(given, [self.token])

    def check(self, authorization: str | None, *, loopback: bool) -> None:
        """Raise 401/403 unless the request may operate the hub.

        ``loopback``: the client is on this machine (and not behind a trusted proxy).
        """
        if self.token is not None:
            if not matches(bearer(authorization, "the admin API"), [self.token]):
                raise Forbidden("this token may not use the admin API")
            return
        if not self.hub_open:
            raise Forbidden(
                "the admin API needs an admin token on a hub with publisher tokens: "
                "start the hub with --admin-token (RSHUB_ADMIN_TOKEN)"
            )
        if not loopback:
            raise Forbidden(
                "without an admin token (--admin-token), the admin API answers only "
                "loopback clients"
            )


class MetricsAccess:
    """Who may scrape ``/metrics``: anyone, or, with a metrics token configured, a request
    bearing it or the admin token (Prometheus sends ``Authorization: Bearer``)."""

    def __init__(self, settings: Settings) -> None:
        self.tokens = [
            t.encode() for t in (settings.metrics_token, settings.admin_token) if t is not None
        ]
        self.required = settings.metrics_token is not None

    def check(self, authorization: str | None) -> None:
        """Raise 401 unless the request may scrape (a wrong token is 401 too: a scraper
        either has the credential or not; there is nothing else a token could allow)."""
        if not self.required:
            return
        given = bearer(authorization, "/metrics (RSHUB_METRICS_TOKEN is set)")
        if not matches(given, self.tokens):
            raise Unauthorized("this token may not read /metrics")
