"""Signed read tokens as plain data: minting, and every refusal naming its reason."""

from __future__ import annotations

import math
import time

import jwt
import pytest

from hub.core.access import ReadAccess
from hub.core.exceptions import Forbidden, Unauthorized
from hub.core.read_tokens import Grant, SignedReadTokens, mint
from hub.core.settings import Settings

KEY = "k" * 40
OTHER = "o" * 40
#: An expiry the tests never reach (parameters are built when the module is imported).
LATER = time.time() + 86400


def _decode_problem(token: str) -> str:
    with pytest.raises(Unauthorized) as caught:
        SignedReadTokens(KEY).topics(token.encode())
    return caught.value.message


def test_a_minted_token_reads_its_topics() -> None:
    token = mint(KEY, ["news", "wiki", "news"], 3600)
    assert SignedReadTokens(KEY).topics(token.encode()) == {"news", "wiki"}
    claims = jwt.decode(token, KEY, algorithms=["HS256"])
    assert claims["exp"] - claims["iat"] == 3600


@pytest.mark.parametrize(
    ("claims", "key", "algorithm", "problem"),
    [
        ({"topics": ["t"], "exp": time.time() - 3600}, KEY, "HS256", "expired"),
        ({"topics": ["t"], "exp": LATER}, OTHER, "HS256", "signature"),
        ({"topics": ["t"], "exp": LATER}, KEY + KEY, "HS512", "HS256"),
        ({"topics": ["t"], "exp": LATER}, None, "none", "HS256"),
        ({"topics": ["t"]}, KEY, "HS256", "'exp'"),
        ({"exp": LATER}, KEY, "HS256", "'topics'"),
        ({"topics": "t", "exp": LATER}, KEY, "HS256", "'topics'"),
        (
            {"topics": ["t"], "exp": LATER, "nbf": LATER * 2},
            KEY,
            "HS256",
            "yet",
        ),
    ],
    ids=["expired", "wrong-key", "hs512", "alg-none", "no-exp", "no-topics", "topics-str", "nbf"],
)
def test_refusals_name_the_problem(
    claims: dict[str, object], key: str | None, algorithm: str, problem: str
) -> None:
    assert problem in _decode_problem(jwt.encode(claims, key, algorithm=algorithm))


@pytest.mark.parametrize("token", ["a.b.c", "..", "x.y.z" * 3, "e30.e30.", "\u00e9.\u00e9.\u00e9"])
def test_garbage_shaped_like_a_jwt_is_401(token: str) -> None:
    assert "not a valid JWT" in _decode_problem(token) or "HS256" in _decode_problem(token)


def test_short_keys_are_refused_and_the_key_is_never_shown() -> None:
    with pytest.raises(ValueError):
        mint("short", ["t"], 60)
    with pytest.raises(ValueError) as caught:
        Settings(jwt_key="s3cret-but-too-short")
    assert "s3cret" not in str(caught.value)
    settings = Settings(jwt_key=KEY)
    assert KEY not in repr(settings) and KEY not in str(settings.model_dump())
    assert KEY not in repr(SignedReadTokens(KEY))


def test_read_access_takes_a_signed_token_for_its_topics_only() -> None:
    readers = ReadAccess(Settings(read_tokens=["r"], jwt_key=KEY))
    token = mint(KEY, ["news"], 60)
    readers.check("news", f"Bearer {token}")
    with pytest.raises(Forbidden) as caught:
        readers.check("wiki", f"Bearer {token}")
    assert "'news'" in caught.value.message and "'wiki'" in caught.value.message
    sees = readers.sight(f"Bearer {token}")
    assert sees("news") and not sees("wiki")
    # Without a configured key a JWT is just a token that matches nothing.
    with pytest.raises(Forbidden):
        ReadAccess(Settings(read_tokens=["r"])).check("news", f"Bearer {token}")


def test_verified_tokens_are_remembered_in_bounded_memory_until_they_expire() -> None:
    tokens = SignedReadTokens(KEY)
    minted = [mint(KEY, [f"t{i}"], 60).encode() for i in range(1100)]
    for token in minted:
        assert tokens.topics(token) == {f"t{minted.index(token)}"}
    assert len(tokens._verified) == 1024
    # Remembered only as long as the token is valid: past its exp, it is decoded again.
    last = minted[-1]
    grant = tokens._verified[last]
    assert grant.topics == {"t1099"} and time.time() + 50 < grant.ends_at <= time.time() + 70
    tokens._verified[last] = Grant(frozenset({"forged"}), time.time() - 1)
    assert tokens.topics(last) == {"t1099"}


#: ``exp`` values that are not a number of seconds, and what the refusal names.
NOT_NUMBERS = {
    "a string": "9999999999",
    "a boolean": True,
    "NaN": float("nan"),
    "a list": [LATER],
}


@pytest.mark.parametrize("case", NOT_NUMBERS)
def test_an_exp_that_is_not_a_number_is_refused_naming_the_claim(case: str) -> None:
    token = jwt.encode({"topics": ["t"], "exp": NOT_NUMBERS[case]}, KEY)
    problem = _decode_problem(token)
    assert "'exp'" in problem and "number" in problem, problem
    # null is no exp at all (PyJWT's reading): named as missing
    assert "no 'exp' claim" in _decode_problem(jwt.encode({"topics": ["t"], "exp": None}, KEY))


@pytest.mark.parametrize(
    "exp",
    [1e30, 10**400, float("inf"), LATER + 3600],
    ids=["1e30", "400-digits", "infinity", "a-day-and-an-hour"],
)
def test_an_exp_beyond_the_maximum_lifetime_is_refused(exp: float) -> None:
    problem = _decode_problem(jwt.encode({"topics": ["t"], "exp": exp}, KEY))
    assert "'exp'" in problem and "RSHUB_JWT_MAX_TTL" in problem, problem


def test_the_maximum_lifetime_is_a_setting_with_the_clock_leeway() -> None:
    tokens = SignedReadTokens(KEY, max_ttl=600)
    now = time.time()
    for ahead in (60.5, 600, 605):  # a float exp is a number too; 5 s of a minter's skew
        token = jwt.encode({"topics": ["t"], "exp": now + ahead}, KEY).encode()
        assert tokens.grant(token).ends_at == pytest.approx(now + ahead + 10)
    with pytest.raises(Unauthorized) as caught:
        tokens.topics(jwt.encode({"topics": ["t"], "exp": now + 630}, KEY).encode())
    assert "600 s (RSHUB_JWT_MAX_TTL)" in caught.value.message
    # -inf is long past
    assert "expired" in _decode_problem(jwt.encode({"topics": ["t"], "exp": -math.inf}, KEY))


def test_read_access_uses_the_configured_maximum_lifetime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RSHUB_JWT_MAX_TTL", "120")
    settings = Settings(read_tokens=["r"], jwt_key=KEY)
    assert settings.jwt_max_ttl == 120
    readers = ReadAccess(settings)
    readers.check("news", f"Bearer {mint(KEY, ['news'], 120)}")
    with pytest.raises(Unauthorized) as caught:
        readers.check("news", f"Bearer {mint(KEY, ['news'], 3600)}")
    assert "RSHUB_JWT_MAX_TTL" in caught.value.message
    for bad in ("0", "-5", "nan", "inf", "a day"):
        monkeypatch.setenv("RSHUB_JWT_MAX_TTL", bad)
        with pytest.raises(ValueError, match="jwt_max_ttl"):
            Settings()
