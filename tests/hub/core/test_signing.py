"""Sans I/O: Standard Webhooks signatures, rotation headers, the token bucket and the new
``hub.*`` parameters of a subscription request."""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools

import pytest

from hub.core import signing, token_bucket, websub
from hub.core.exceptions import BadRequest
from hub.core.token_bucket import RateLimit, TokenBucket
from hub.core.topics import HubUrls
from subscriber import signatures

U = HubUrls("http://hub.example")
LEASES = {"lease_default": 864000, "lease_min": 60, "lease_max": 2592000}

#: The worked example of the Standard Webhooks specification (and its reference libraries).
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID, SPEC_TS, SPEC_BODY = "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def subscribe(prefixes: list[str] | None = None, **extra: str) -> websub.SubscriptionRequest:
    form = {
        "hub.mode": "subscribe",
        "hub.topic": U.topic("news"),
        "hub.callback": "https://sub.example/cb",
        **extra,
    }
    result = websub.parse_request(form, urls=U, prefixes=prefixes, **LEASES)
    assert isinstance(result, websub.SubscriptionRequest)
    return result


def test_standard_webhooks_signature_matches_the_specifications_example() -> None:
    assert signing.standard_signature(SPEC_SECRET, SPEC_ID, SPEC_TS, SPEC_BODY) == SPEC_SIGNATURE
    assert signatures.sign_standard(SPEC_SECRET, SPEC_ID, SPEC_TS, SPEC_BODY) == SPEC_SIGNATURE
    headers = {
        "webhook-id": SPEC_ID,
        "webhook-timestamp": str(SPEC_TS),
        "webhook-signature": SPEC_SIGNATURE,
    }
    ok = signatures.verify("standard-webhooks", [SPEC_SECRET], headers, SPEC_BODY, now=SPEC_TS)
    assert ok
    # A plain (non-whsec_) secret is its UTF-8 bytes, as for X-Hub-Signature.
    plain = hmac.new(b"k", b"i.1.b", hashlib.sha256).digest()
    assert signing.standard_signature("k", "i", 1, b"b") == "v1," + base64.b64encode(plain).decode()


def test_rotation_headers_carry_both_standard_signatures_but_one_websub_signature() -> None:
    new, old = "whsec_" + base64.b64encode(b"n" * 24).decode(), "old-secret"
    both = signing.headers(
        signing.Scheme.STANDARD_WEBHOOKS, [new, old], b"body", msg_id="m", timestamp=7
    )
    assert both["webhook-id"] == "m" and both["webhook-timestamp"] == "7"
    assert both["webhook-signature"].split(" ") == [
        signing.standard_signature(new, "m", 7, b"body"),
        signing.standard_signature(old, "m", 7, b"body"),
    ]
    websub_headers = signing.headers(
        signing.Scheme.WEBSUB, [new, old], b"body", msg_id="m", timestamp=7
    )
    assert websub_headers == {"X-Hub-Signature": websub.signature(old, b"body")}
    assert signing.headers(signing.Scheme.WEBSUB, [], b"body", msg_id="m", timestamp=7) == {}


@pytest.mark.parametrize(
    ("case", "headers", "now"),
    [
        ("stale", {"webhook-timestamp": str(SPEC_TS)}, SPEC_TS + 301),
        ("future", {"webhook-timestamp": str(SPEC_TS)}, SPEC_TS - 301),
        ("other id", {"webhook-id": "msg_other"}, SPEC_TS),
        ("no signature", {"webhook-signature": ""}, SPEC_TS),
        ("v2 only", {"webhook-signature": "v2," + SPEC_SIGNATURE[3:]}, SPEC_TS),
        ("timestamp not digits", {"webhook-timestamp": "١٦١٤٢٦٥٣٣٠"}, SPEC_TS),
        ("non-ascii signature", {"webhook-signature": "v1,é"}, SPEC_TS),
    ],
)
def test_the_subscriber_refuses_a_stale_or_wrong_standard_signature(
    case: str, headers: dict[str, str], now: int
) -> None:
    sent = {
        "webhook-id": SPEC_ID,
        "webhook-timestamp": str(SPEC_TS),
        "webhook-signature": "v1,bm9wZQ== " + SPEC_SIGNATURE,
        **headers,
    }
    assert not signatures.verify("standard-webhooks", [SPEC_SECRET], sent, SPEC_BODY, now=now), case


def test_the_token_bucket_allows_a_burst_then_the_rate() -> None:
    bucket = RateLimit(4.0, 2).bucket(now=100.0)
    assert isinstance(bucket, TokenBucket)
    sent = []
    now = 100.0
    while now < 103.0:  # a caller that always wants to send, stepping its clock
        wait = bucket.take(now)
        if wait == 0:
            sent.append(now)
        else:
            now += wait
    # 2 at once, then one every 0.25 s: at most burst + rate * elapsed in any window.
    assert sent[:2] == [100.0, 100.0] and len(sent) == 2 + 11  # 100.25 ... 102.75
    assert all(b - a == pytest.approx(0.25) for a, b in itertools.pairwise(sent[1:]))
    assert RateLimit(0, 1).bucket(now=0) is None  # 0 = no limit


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2", RateLimit(2.0, 2)), ("0.5,3", RateLimit(0.5, 3)), ("0", RateLimit(0.0, 1))],
)
def test_rate_limit_values(text: str, expected: RateLimit) -> None:
    assert token_bucket.parse(text) == expected
    assert subscribe(**{"hub.rate_limit": text}).rate_limit == expected


def test_new_parameters_parse_into_the_request() -> None:
    req = subscribe(
        ["https://example.org/a/", "https://example.org/b/"],
        **{
            "hub.signature": "standard-webhooks",
            "hub.secret": "whsec_" + base64.b64encode(b"k" * 32).decode(),
            "hub.filter.change": "created, updated",
        },
    )
    assert req.signature is signing.Scheme.STANDARD_WEBHOOKS
    assert req.event_filter is not None
    assert req.event_filter.changes == {"created", "updated"}
    assert req.event_filter.prefixes == ("https://example.org/a/", "https://example.org/b/")
    plain = subscribe()
    assert plain.signature is signing.Scheme.WEBSUB
    assert plain.event_filter is None and plain.rate_limit is None


@pytest.mark.parametrize(
    ("form", "prefixes", "named"),
    [
        ({"hub.signature": "hmac"}, None, "hub.signature"),
        ({"hub.signature": "standard-webhooks"}, None, "hub.secret"),
        ({"hub.secret": "whsec_not base64!"}, None, "hub.secret"),
        ({"hub.secret": "whsec_"}, None, "hub.secret"),
        ({"hub.filter.change": "moved"}, None, "hub.filter.change"),
        ({"hub.filter.change": ","}, None, "hub.filter.change"),
        ({}, ["https://example.org/"] * 33, "hub.filter.prefix"),
        ({"hub.rate_limit": "fast"}, None, "hub.rate_limit"),
        ({"hub.rate_limit": "nan"}, None, "hub.rate_limit"),
        ({"hub.rate_limit": "inf"}, None, "hub.rate_limit"),
        ({"hub.rate_limit": "-1"}, None, "hub.rate_limit"),
        ({"hub.rate_limit": "1e9"}, None, "hub.rate_limit"),
        ({"hub.rate_limit": "2,0"}, None, "hub.rate_limit"),
        ({"hub.rate_limit": "2,x"}, None, "hub.rate_limit"),
        ({"hub.rate_limit": "٣"}, None, "hub.rate_limit"),
    ],
)
def test_a_bad_new_parameter_is_a_400_naming_it(
    form: dict[str, str], prefixes: list[str] | None, named: str
) -> None:
    with pytest.raises(BadRequest) as caught:
        subscribe(prefixes, **form)
    assert named in caught.value.message


def test_an_unsubscription_ignores_the_new_parameters() -> None:
    form = {
        "hub.mode": "unsubscribe",
        "hub.topic": U.topic("news"),
        "hub.callback": "https://sub.example/cb",
        "hub.signature": "standard-webhooks",
        "hub.rate_limit": "fast",
        "hub.filter.change": "moved",
    }
    req = websub.parse_request(form, urls=U, **LEASES)
    assert isinstance(req, websub.SubscriptionRequest) and req.mode is websub.Mode.UNSUBSCRIBE
