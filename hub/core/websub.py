"""WebSub hub protocol, sans I/O: requests, verification of intent, signatures.

Back-off and ``Retry-After``: :mod:`rsclient.backoff`.

References are to the W3C WebSub Recommendation (2018).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from urllib.parse import urlencode, urlsplit, urlunsplit

from hub.core import signing, token_bucket
from hub.core.addresses import MAX_URL_LENGTH, as_uri, check_http_url
from hub.core.events import EventFilter
from hub.core.exceptions import BadRequest, UnknownHubName
from hub.core.resume_points import parse_since
from hub.core.revocations import Credential
from hub.core.topics import HubUrls

MAX_SECRET_BYTES = 200  # §5.1: hub.secret MUST be less than 200 bytes
MAX_CALLBACK_LENGTH = MAX_URL_LENGTH
#: A longer hub.lease_seconds asks for "as long as possible": it gets the maximum.
_MAX_LEASE_DIGITS = 12


class TopicDenied(BadRequest):
    """A well-formed request for a topic this hub will not serve: deny it (§5.2)."""

    def __init__(self, message: str, *, callback: str, topic_url: str) -> None:
        super().__init__(message)
        self.callback = callback
        self.topic_url = topic_url


class Mode(StrEnum):
    SUBSCRIBE = "subscribe"
    UNSUBSCRIBE = "unsubscribe"
    PUBLISH = "publish"


@dataclass(frozen=True, slots=True)
class PublishPing:
    """A ``hub.mode=publish`` request: fetch ``url`` and store its new changes."""

    url: str


@dataclass(frozen=True, slots=True)
class SubscriptionRequest:
    """A validated ``hub.mode=subscribe|unsubscribe`` request (§5.1)."""

    mode: Mode
    topic_url: str
    topic: str
    callback: str
    lease_seconds: int
    secret: str | None
    #: rshub extension ``hub.since``: start delivering after this event id.
    since: str | None
    # -- rshub extensions ``hub.signature``, ``hub.filter.*``, ``hub.rate_limit``
    signature: signing.Scheme = signing.Scheme.WEBSUB
    event_filter: EventFilter | None = None
    rate_limit: token_bucket.RateLimit | None = None
    #: When the read access the request was made with ends (a signed read token's end,
    #: epoch seconds): the lease never runs past it. None: it does not end.
    grant_ends_at: float | None = None
    #: The token it was made with (a private topic's), which the subscription keeps: when
    #: the operator revokes it, deliveries stop (:mod:`hub.core.revocations`).
    credential: Credential | None = None

    def lease_at(self, now: float) -> int:
        """The lease to grant at ``now``: the one asked for, cut to the grant's remaining
        whole seconds (0: the grant has ended, nothing to grant)."""
        if self.grant_ends_at is None:
            return self.lease_seconds
        return max(0, min(self.lease_seconds, math.floor(self.grant_ends_at - now)))


def within_grant(
    req: SubscriptionRequest, ends_at: float | None, credential: Credential | None = None
) -> SubscriptionRequest:
    """``req`` made with read access that ends at ``ends_at`` (None: never), given by the
    token ``credential`` names (None: an open topic, no token)."""
    if ends_at is None and credential is None:
        return req
    return replace(req, grant_ends_at=ends_at, credential=credential)


def parse_request(
    form: Mapping[str, str],
    *,
    urls: HubUrls,
    lease_default: int,
    lease_min: int,
    lease_max: int,
    prefixes: list[str] | None = None,
) -> SubscriptionRequest | PublishPing:
    """Validate the form of a ``POST /``; unknown parameters are ignored (§5.1).

    ``prefixes``: every ``hub.filter.prefix`` of the form (the one parameter that repeats).

    Raises :class:`BadRequest` naming the faulty parameter, or :class:`TopicDenied` for a
    well-formed request the hub will not serve.
    """
    mode_text = form.get("hub.mode", "")
    try:
        mode = Mode(mode_text)
    except ValueError:
        raise BadRequest(
            f"hub.mode must be subscribe, unsubscribe or publish, got {mode_text[:40]!r}"
        ) from None
    if mode is Mode.PUBLISH:
        what = "hub.url" if form.get("hub.url") else "hub.topic"
        url = (form.get("hub.url") or form.get("hub.topic") or "").strip()
        if not url:
            raise BadRequest("hub.mode=publish needs hub.url (or hub.topic)")
        check_http_url(url, what)
        return PublishPing(url)

    callback = check_callback_syntax(form.get("hub.callback", "").strip())
    topic_url = form.get("hub.topic", "").strip()
    if not topic_url:
        raise BadRequest("hub.topic is required")
    stray: UnknownHubName | None = None
    try:
        topic = urls.name_from_url(topic_url)
    except UnknownHubName as exc:
        # The client's mistake about this hub's name: a 400 (after the other fields are
        # judged), not a denial sent to the callback.
        stray, topic = exc, ""
    except BadRequest as exc:
        raise TopicDenied(exc.message, callback=callback, topic_url=topic_url) from None

    lease_text = form.get("hub.lease_seconds", "").strip()
    if lease_text:
        if not (lease_text.isascii() and lease_text.isdigit()):
            raise BadRequest(f"hub.lease_seconds must be a whole number, got {lease_text[:20]!r}")
        if len(lease_text) > _MAX_LEASE_DIGITS:
            lease = lease_max
        else:
            lease = min(max(int(lease_text), lease_min), lease_max)
    else:
        lease = lease_default

    secret = form.get("hub.secret")
    if secret is not None:
        if not secret:
            secret = None
        elif len(secret.encode()) >= MAX_SECRET_BYTES:
            raise BadRequest(f"hub.secret must be less than {MAX_SECRET_BYTES} bytes")

    since = form.get("hub.since") or None
    if since is not None:
        parse_since(since, "hub.since")  # an event id or a time (its cursor: the web layer's)
    scheme, event_filter, rate_limit = signing.Scheme.WEBSUB, None, None
    if mode is Mode.SUBSCRIBE:  # an unsubscription ignores them
        scheme, event_filter, rate_limit = _extensions(form, secret, prefixes or [])
    if stray is not None:
        raise stray
    return SubscriptionRequest(
        mode, topic_url, topic, callback, lease, secret, since, scheme, event_filter, rate_limit
    )


def _extensions(
    form: Mapping[str, str], secret: str | None, prefixes: list[str]
) -> tuple[signing.Scheme, EventFilter | None, token_bucket.RateLimit | None]:
    """``hub.signature``, ``hub.filter.change``/``prefix`` and ``hub.rate_limit``."""
    scheme = signing.parse_scheme(form.get("hub.signature"))
    if secret is not None:
        signing.check_secret(secret)
    elif scheme is signing.Scheme.STANDARD_WEBHOOKS:
        raise BadRequest("hub.signature=standard-webhooks needs a hub.secret")
    query = {"change": form["hub.filter.change"]} if "hub.filter.change" in form else {}
    try:
        event_filter = EventFilter.from_query(query, prefixes)
    except BadRequest as exc:
        name = "hub.filter.change" if "change" in exc.message else "hub.filter.prefix"
        raise BadRequest(f"{name}: {exc.message}") from None
    rate_text = form.get("hub.rate_limit")
    rate_limit = token_bucket.parse(rate_text) if rate_text else None
    return scheme, event_filter, rate_limit


def check_callback_syntax(callback: str) -> str:
    """``callback`` as the URI it is stored, delivered to and keyed by (an IRI converted)."""
    check_http_url(callback, "hub.callback")
    return as_uri(callback, "hub.callback")


def new_challenge() -> str:
    return secrets.token_urlsafe(24)


def verification_url(
    callback: str, mode: Mode, topic_url: str, challenge: str, lease_seconds: int | None
) -> str:
    """The callback URL with the §5.3 verification parameters appended to its query."""
    params = {"hub.mode": str(mode), "hub.topic": topic_url, "hub.challenge": challenge}
    if lease_seconds is not None:
        params["hub.lease_seconds"] = str(lease_seconds)
    return _with_query(callback, params)


def denial_url(callback: str, topic_url: str, reason: str) -> str:
    """§5.2: tell the subscriber its subscription was denied."""
    return _with_query(
        callback, {"hub.mode": "denied", "hub.topic": topic_url, "hub.reason": reason}
    )


def _with_query(url: str, params: dict[str, str]) -> str:
    parts = urlsplit(url)
    query = parts.query + ("&" if parts.query else "") + urlencode(params)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))


#: §7: the ``X-Hub-Signature`` value, sha256 (schemes and rotation: :mod:`hub.core.signing`).
signature = signing.websub_signature
