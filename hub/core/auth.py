"""Publisher access control: bearer tokens, global and per topic, less those revoked
(:mod:`hub.core.revocations`)."""

from __future__ import annotations

import hmac

from hub.core.exceptions import ConfigurationError, Forbidden, Unauthorized
from hub.core.revocations import Credential, Revocations
from hub.core.settings import Settings


class PublisherAuth:
    """Who may publish to which topic.

    With no token configured at all, anyone who can reach the hub may publish; that is only
    allowed on a loopback bind or with an explicit ``--open`` (:meth:`check_startup`).
    """

    def __init__(self, settings: Settings, revocations: Revocations | None = None) -> None:
        #: The revocations in force (the runtime keeps them current).
        self.revocations = Revocations() if revocations is None else revocations
        self.global_tokens = [t.encode() for t in settings.tokens]
        self.topic_tokens = {
            name: [t.encode() for t in tokens] for name, tokens in settings.topic_tokens.items()
        }
        self.open = not self.global_tokens and not self.topic_tokens

    @staticmethod
    def check_startup(settings: Settings) -> None:
        if settings.tokens or settings.topic_tokens or settings.open or settings.binds_loopback:
            return
        raise ConfigurationError(
            f"refusing to bind {settings.host} without publisher tokens: set RSHUB_TOKENS "
            "(or --token) or pass --open to let anyone publish"
        )

    def check(self, topic: str, authorization: str | None) -> None:
        """Raise 401/403 unless ``authorization`` may publish to ``topic`` (403 for a token
        revoked for every topic or for this one)."""
        if self.open:
            return
        self._check_token(
            self.global_tokens + self.topic_tokens.get(topic, []),
            authorization,
            f"this token may not publish to topic {topic!r}",
            topic,
        )

    def check_global(self, authorization: str | None) -> None:
        """Raise 401/403 unless ``authorization`` is a token for every topic (operators)."""
        if self.open:
            return
        self._check_token(self.global_tokens, authorization, "this needs a hub-wide token", None)

    def _check_token(
        self, allowed: list[bytes], authorization: str | None, refusal: str, topic: str | None
    ) -> None:
        if not authorization:
            raise Unauthorized("this needs 'Authorization: Bearer <token>'")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("Authorization must be 'Bearer <token>'")
        given = token.strip().encode()
        if self.revocations:
            self.revocations.check(Credential.of(given), topic)
        # Compare against every token so timing does not reveal which matched.
        ok = False
        for candidate in allowed:
            ok |= hmac.compare_digest(given, candidate)
        if not ok:
            raise Forbidden(refusal)
