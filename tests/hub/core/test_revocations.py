"""Token revocations as plain data: what a request names, and what the checks refuse."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from hub.core.access import ReadAccess
from hub.core.auth import PublisherAuth
from hub.core.exceptions import BadRequest, Forbidden, TokenRevoked
from hub.core.read_tokens import mint
from hub.core.revocations import (
    Credential,
    Kind,
    Revocation,
    Revocations,
    fingerprint,
    requested,
)
from hub.core.settings import Settings

TOKEN = "reader-token-4c1e"
FP = hashlib.sha256(TOKEN.encode()).hexdigest()
KEY = "k" * 40


def test_a_token_is_named_by_its_sha256_and_the_token_goes_no_further() -> None:
    revocation = requested({"token": f" {TOKEN} ", "topic": "news"}, 12.5)
    assert revocation == Revocation(Kind.FINGERPRINT, FP, "news", 12.5)
    assert fingerprint(TOKEN) == fingerprint(TOKEN.encode()) == FP
    assert TOKEN not in repr(revocation) and TOKEN not in str(revocation.public())
    assert revocation.public()["fingerprint"] == FP and revocation.public()["jti"] is None
    assert requested({"fingerprint": FP.upper()}) == Revocation(Kind.FINGERPRINT, FP)
    assert requested({"jti": "visitor-1"}) == Revocation(Kind.JTI, "visitor-1")


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({}, "exactly one of token, fingerprint"),
        ({"token": TOKEN, "jti": "x"}, "got token, jti"),
        ({"topics": "news", "token": TOKEN}, "unknown field 'topics'"),
        ({"token": 5}, "'token' must be a string, not int"),
        ({"token": TOKEN, "topic": None}, "'topic' must be a string, not NoneType"),
        ({"token": "has space"}, "visible ASCII"),
        ({"token": "x" * 4097}, "1-4096"),
        ({"token": "tøken"}, "visible ASCII"),
        ({"fingerprint": FP[:-1]}, "64 hex digits"),
        ({"fingerprint": "g" * 64}, "64 hex digits"),
        ({"jti": "a b"}, "a jti is"),
        ({"jti": "j" * 257}, "a jti is"),
        ({"token": TOKEN, "topic": "a/b"}, "topic: invalid topic name"),
        ({"token": TOKEN, "topic": ""}, "topic: "),
    ],
    ids=lambda value: str(value)[:40],
)
def test_a_request_naming_no_token_or_a_bad_one_is_refused_naming_the_field(
    fields: dict[str, Any], said: str
) -> None:
    with pytest.raises(BadRequest) as caught:
        requested(fields)
    assert said in caught.value.message, caught.value.message
    assert "x" * 100 not in caught.value.message  # never echoed whole


def test_a_stored_field_round_trips_and_one_the_hub_did_not_write_is_refused() -> None:
    for revocation in (
        Revocation(Kind.FINGERPRINT, FP, None, 1.0),
        Revocation(Kind.JTI, "visitor-1", "news", 2.0),
    ):
        assert Revocation.from_field(revocation.field, revocation.revoked_at) == revocation
    for field in ("", "fingerprint", f"fingerprint {FP}", f"token {FP} *", "fingerprint ab *"):
        with pytest.raises(ValueError):
            Revocation.from_field(field)


def test_the_view_refuses_per_topic_and_everywhere_by_fingerprint_and_jti() -> None:
    view = Revocations()
    credential = Credential(FP, "visitor-1")
    view.check(credential, "news")  # nothing revoked: no refusal, no cost
    view.replace([Revocation(Kind.FINGERPRINT, FP, "news")], 1)
    with pytest.raises(TokenRevoked, match="revoked for topic 'news'"):
        view.check(credential, "news")
    view.check(credential, "sport")
    view.check(credential, None)  # a hub-wide use counts only revocations everywhere
    assert view.revoked_topics(credential) == {"news"}
    view.replace([Revocation(Kind.JTI, "visitor-1")], 2)
    assert view.refuses(credential, "sport") and view.refuses(credential, None)
    assert not view.refuses(Credential(FP), "sport")
    assert view.revoked_topics(credential) is None
    with pytest.raises(TokenRevoked) as caught:
        view.check(credential, "sport")
    assert f"fingerprint {FP[:12]}" in caught.value.message
    assert caught.value.http_status == 403 and FP not in caught.value.message


def test_read_and_publish_checks_refuse_a_revoked_token() -> None:
    settings = Settings(
        tokens=["pub"],
        read_tokens=[TOKEN],
        topic_read_tokens={"news": ["nr"], "sport": ["nr"]},
        jwt_key=KEY,
    )
    view = Revocations()
    readers, publishers = ReadAccess(settings, view), PublisherAuth(settings, view)
    signed = mint(KEY, ["news"], 600, jti="visitor-1")
    grant = readers.grant("news", f"Bearer {signed}")
    assert grant.credential == Credential(fingerprint(signed), "visitor-1")
    assert readers.grant("news", f"Bearer {TOKEN}").credential == Credential(FP)
    view.replace(
        [
            Revocation(Kind.FINGERPRINT, FP),
            Revocation(Kind.FINGERPRINT, fingerprint("nr"), "news"),
            Revocation(Kind.FINGERPRINT, fingerprint("pub"), "news"),
            Revocation(Kind.JTI, "visitor-1"),
        ],
        1,
    )
    for topic, token in (("x", TOKEN), ("news", "nr"), ("news", signed)):
        with pytest.raises(TokenRevoked):
            readers.check(topic, f"Bearer {token}")
    assert readers.check("sport", "Bearer nr") is None  # the other grant is kept
    with pytest.raises(TokenRevoked, match="for topic 'news'"):
        publishers.check("news", "Bearer pub")
    publishers.check("sport", "Bearer pub")
    publishers.check_global("Bearer pub")
    with pytest.raises(Forbidden):  # not a publisher token at all: as before
        publishers.check("sport", f"Bearer {TOKEN}")
    # Listings: a token revoked everywhere sees what no token does; one revoked for a topic
    # sees the rest.
    assert not readers.sight(f"Bearer {TOKEN}")("x")
    sees = readers.sight("Bearer nr")
    assert sees("sport") and not sees("news")
    sees = readers.sight("Bearer pub")
    assert sees("sport") and not sees("news")
    assert not readers.sight(f"Bearer {signed}")("news")


def test_a_revocation_may_expire_at_a_time_with_its_offset() -> None:
    revocation = requested({"token": TOKEN, "expires": "2027-01-01T00:00:00Z"}, 1_700_000_000)
    assert revocation.expires_at == 1798761600.0
    assert revocation.public()["expires"] == "2027-01-01T00:00:00.000+00:00"
    assert not revocation.expired(1798761599.9) and revocation.expired(1798761600.0)
    # A static token's revocation, given no expiry, never expires.
    assert requested({"token": TOKEN}, 1.0).expires_at is None
    for expires, said in (
        ("tomorrow", "ISO 8601 time with its offset"),
        ("2027-01-01T00:00:00", "needs its offset"),
        ("2020-01-01T00:00:00+00:00", "not in the future"),
    ):
        with pytest.raises(BadRequest, match=said) as caught:
            requested({"token": TOKEN, "expires": expires}, 1_700_000_000)
        assert caught.value.detail.get("field") == "expires"


def test_a_signed_read_tokens_revocation_ends_with_the_token() -> None:
    """After its ``exp`` (and the leeway) the token is refused anyway: its revocation need
    not be kept, nor fill the hub's 10,000."""
    from hub.core.read_tokens import LEEWAY_SECONDS

    token = mint(KEY, ["news"], 600)
    revocation = requested({"token": token}, 1.0)
    import jwt

    exp = jwt.decode(token, options={"verify_signature": False})["exp"]
    assert revocation.expires_at == exp + LEEWAY_SECONDS
    # An explicit expiry wins; a token that is no JWT, or a JWT-like text without a
    # numeric exp, gives none.
    assert requested({"token": token, "expires": "2099-01-01T00:00:00Z"}, 1.0).expires_at == (
        4070908800.0
    )
    assert requested({"token": "a.b.c"}, 1.0).expires_at is None


def test_the_view_stops_applying_an_expired_revocation() -> None:
    view = Revocations()
    credential = Credential(FP)
    view.replace(
        [
            Revocation(Kind.FINGERPRINT, FP, "news", 1.0, expires_at=100.0),
            Revocation(Kind.FINGERPRINT, FP, "sport", 1.0),
        ],
        7,
    )
    assert view.next_expiry == 100.0
    assert view.drop_expired(99.0) == 0 and view.refuses(credential, "news")
    assert view.drop_expired(100.0) == 1
    assert not view.refuses(credential, "news") and view.refuses(credential, "sport")
    assert view.version == 7 and view.next_expiry is None
