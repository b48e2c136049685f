"""Who may read which topic, and who may operate the hub: bearer tokens, as plain data.

Reading is open by default. Global read tokens make every topic private; per-topic read
tokens make that topic private, and those of a name prefix (a ``topic_read_tokens`` key
``pri*``) every topic whose name starts so (:mod:`hub.core.topic_patterns`). A private topic
is readable with a global read token, one of its own or its prefixes' read tokens, a token
that may publish to it (a publisher reads what it writes), or a signed read token naming it
or a prefix of it (:mod:`hub.core.read_tokens`). The admin API has a token of
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
from hub.core.topic_patterns import TopicPatterns


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
        #: Private topics by name, and by name prefix (a ``prefix*`` key of
        #: ``topic_read_tokens``: every topic whose name starts so, and its tokens).
        named = {k: v for k, v in settings.topic_read_tokens.items() if not k.endswith("*")}
        self.private_topics = frozenset(named)
        self.prefix_tokens: tuple[tuple[str, list[bytes]], ...] = tuple(
            (k[:-1], _encoded(v))
            for k, v in sorted(settings.topic_read_tokens.items())
            if k.endswith("*")
        )
        self._private_prefixes = tuple(prefix for prefix, _tokens in self.prefix_tokens)
        #: Tokens that read every topic: global read tokens and global publisher tokens.
        self.global_tokens = _encoded(settings.read_tokens) + _encoded(settings.tokens)
        self.topic_tokens: dict[str, list[bytes]] = {}
        for name in set(named) | set(settings.topic_tokens):
            self.topic_tokens[name] = _encoded(
                named.get(name, []) + settings.topic_tokens.get(name, [])
            )
        key = settings.jwt_key
        self.signed: SignedReadTokens | None = None
        if key is not None:
            self.signed = SignedReadTokens(key.get_secret_value(), settings.jwt_max_ttl)

    def is_open(self, topic: str) -> bool:
        """True when ``topic`` is readable without a token."""
        return (
            not self.all_private
            and topic not in self.private_topics
            and not (self._private_prefixes and topic.startswith(self._private_prefixes))
        )

    def _tokens_of(self, topic: str) -> list[bytes]:
        """The tokens that read ``topic``: global ones, its own, its prefixes'."""
        tokens = self.global_tokens + self.topic_tokens.get(topic, [])
        for prefix, more in self.prefix_tokens:
            if topic.startswith(prefix):
                tokens = tokens + more
        return tokens

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
        if matches(given, self._tokens_of(topic)):
            return ReadGrant(None, credential)
        if self.signed is not None and looks_signed(given):
            grant = self.signed.grant(given)  # 401 naming what is wrong with it
            if grant.jti is not None:
                credential = Credential(credential.fingerprint, grant.jti)
                revocations.check(credential, topic)
            if grant.patterns.matches(topic):
                return ReadGrant(grant.ends_at, credential)
            shown = grant.patterns.shown()
            raise Forbidden(f"this read token is for topics {shown}, not {topic!r}")
        raise Forbidden(f"this token may not read topic {topic!r}")

    def check_token(self, authorization: str | None) -> None:
        """Raise 401/403 unless ``authorization`` is absent or carries a token that reads
        something: a stream that follows a topic prefix checks the token it is given once,
        as a stream of one topic does (a wrong or expired token must not look like a
        token that reads no private topic yet), and then reads each topic it finds with it."""
        if authorization is None or not (
            self.all_private or self.private_topics or self._private_prefixes
        ):
            return  # no token, or a hub whose every topic is open: it changes nothing
        given = bearer(authorization, "reading")
        credential = Credential.of(given)
        self.revocations.check(credential, None)
        every = self.global_tokens + [t for ts in self.topic_tokens.values() for t in ts]
        every += [t for _prefix, ts in self.prefix_tokens for t in ts]
        if matches(given, every):
            return
        if self.signed is not None and looks_signed(given):
            grant = self.signed.grant(given)  # 401 naming what is wrong with it
            if grant.jti is not None:
                self.revocations.check(Credential(credential.fingerprint, grant.jti), None)
            return
        raise Forbidden("this token reads no topic of this hub")

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
        signed = self._signed_patterns(given)
        names = (
            frozenset(
                name
                for name, tokens in self.topic_tokens.items()
                if given is not None and matches(given, tokens)
            )
            | signed.names
        ) - revoked
        prefixes = signed.prefixes + tuple(
            prefix
            for prefix, tokens in self.prefix_tokens
            if given is not None and matches(given, tokens)
        )
        if not prefixes:
            return lambda topic: topic in names or self.is_open(topic)
        return lambda topic: (
            topic in names
            or (topic.startswith(prefixes) and topic not in revoked)
            or self.is_open(topic)
        )

    def _signed_patterns(self, given: bytes | None) -> TopicPatterns:
        if self.signed is None or given is None or not looks_signed(given):
            return TopicPatterns()
        try:
            return self.signed.grant(given).patterns
        except Unauthorized:
            return TopicPatterns()

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
