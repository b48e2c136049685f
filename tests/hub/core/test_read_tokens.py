"""Signed read tokens as plain data: minting, and every refusal naming its reason."""

from __future__ import annotations

import time

import jwt
import pytest

from hub.core.access import ReadAccess
from hub.core.exceptions import Forbidden, Unauthorized
from hub.core.read_tokens import SignedReadTokens, mint
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
    names, until = tokens._verified[last]
    assert names == {"t1099"} and time.time() + 50 < until <= time.time() + 60 + 10
    tokens._verified[last] = (frozenset({"forged"}), time.time() - 1)
    assert tokens.topics(last) == {"t1099"}
