"""hub.core.websub: WebSub requests, verification URLs, signatures and back-off, sans I/O."""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import parse_qs, urlsplit

import pytest

from hub.core import websub
from hub.core.exceptions import BadRequest
from hub.core.topics import HubUrls

U = HubUrls("http://hub.example")
LEASES = {"lease_default": 864000, "lease_min": 60, "lease_max": 2592000}


def parse(**form: str) -> websub.SubscriptionRequest | websub.PublishPing:
    return websub.parse_request(form, urls=U, **LEASES)


def subscribe(**extra: str) -> websub.SubscriptionRequest:
    form = {
        "hub.mode": "subscribe",
        "hub.topic": U.topic("news"),
        "hub.callback": "https://sub.example/cb?x=1",
        **extra,
    }
    result = parse(**form)
    assert isinstance(result, websub.SubscriptionRequest)
    return result


def test_subscribe_is_a_typed_record_with_defaults() -> None:
    req = subscribe(**{"hub.unknown": "ignored"})
    assert req == websub.SubscriptionRequest(
        websub.Mode.SUBSCRIBE,
        U.topic("news"),
        "news",
        "https://sub.example/cb?x=1",
        864000,
        None,
        None,
    )


def test_lease_is_clamped_and_secret_and_since_kept() -> None:
    assert subscribe(**{"hub.lease_seconds": "1"}).lease_seconds == 60
    assert subscribe(**{"hub.lease_seconds": "999999999"}).lease_seconds == 2592000
    req = subscribe(**{"hub.secret": "s" * 199, "hub.since": "17-2"})
    assert req.secret == "s" * 199 and req.since == "17-2"
    assert subscribe(**{"hub.secret": ""}).secret is None


def test_publish_ping_is_a_typed_record() -> None:
    assert parse(**{"hub.mode": "publish", "hub.url": "http://s/x"}) == websub.PublishPing(
        "http://s/x"
    )
    assert parse(**{"hub.mode": "publish", "hub.topic": "http://s/y"}) == websub.PublishPing(
        "http://s/y"
    )


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"hub.mode": "watch"}, "hub.mode must be"),
        ({"hub.mode": "publish"}, "needs hub.url"),
        ({"hub.mode": "subscribe", "hub.topic": "http://t"}, "hub.callback is required"),
        (
            {"hub.mode": "subscribe", "hub.topic": "http://t", "hub.callback": "ftp://x/"},
            "absolute http",
        ),
        (
            {"hub.mode": "subscribe", "hub.topic": "http://t", "hub.callback": "http://u:p@x/"},
            "credentials",
        ),
        ({"hub.mode": "subscribe", "hub.callback": "http://x/"}, "hub.topic is required"),
        (
            {
                "hub.mode": "subscribe",
                "hub.topic": "http://t",
                "hub.callback": "http://x/",
                "hub.lease_seconds": "ten",
            },
            "whole number",
        ),
        (
            {
                "hub.mode": "subscribe",
                "hub.topic": "http://t",
                "hub.callback": "http://x/",
                "hub.secret": "s" * 200,
            },
            "less than 200 bytes",
        ),
        (
            {
                "hub.mode": "subscribe",
                "hub.topic": "http://t",
                "hub.callback": "http://x/",
                "hub.since": "yesterday",
            },
            "invalid event id",
        ),
    ],
)
def test_bad_requests_name_the_parameter(form: dict[str, str], message: str) -> None:
    with pytest.raises(BadRequest, match=message):
        parse(**form)


def test_a_topic_the_hub_will_not_serve_is_denied_not_refused() -> None:
    with pytest.raises(websub.TopicDenied) as info:
        parse(
            **{
                "hub.mode": "subscribe",
                "hub.topic": U.topic("bad name"),
                "hub.callback": "http://x/cb",
            }
        )
    assert info.value.callback == "http://x/cb"
    assert info.value.topic_url == U.topic("bad name")


def test_verification_and_denial_urls_keep_the_callback_query() -> None:
    url = websub.verification_url(
        "http://x/cb?a=1", websub.Mode.SUBSCRIBE, U.topic("t"), "chal", 3600
    )
    parts = urlsplit(url)
    assert parts.path == "/cb"
    assert parse_qs(parts.query) == {
        "a": ["1"],
        "hub.mode": ["subscribe"],
        "hub.topic": [U.topic("t")],
        "hub.challenge": ["chal"],
        "hub.lease_seconds": ["3600"],
    }
    unsub = websub.verification_url("http://x/cb", websub.Mode.UNSUBSCRIBE, "t", "c", None)
    assert "hub.lease_seconds" not in parse_qs(urlsplit(unsub).query)
    denial = parse_qs(urlsplit(websub.denial_url("http://x/cb", "t", "no & never")).query)
    assert denial == {"hub.mode": ["denied"], "hub.topic": ["t"], "hub.reason": ["no & never"]}


def test_challenges_are_fresh() -> None:
    assert len({websub.new_challenge() for _ in range(50)}) == 50


def test_signature_is_hmac_sha256_of_the_body() -> None:
    expected = hmac.new(b"key", b"body", hashlib.sha256).hexdigest()
    assert websub.signature("key", b"body") == f"sha256={expected}"
