"""``--token`` goes to the hub's origin and nowhere else, and is never shown: named cases
and a seeded fuzz of tokens quoted back in every form a server or a log may give them."""

from __future__ import annotations

import io
import json
import logging
import random
import string
from urllib.parse import quote

import pytest

from rsclient.hub_token import HubToken, TokenMask, token_problem

HUB = "http://Hub.example:8080/base/"

SAME_ORIGIN = [
    "http://hub.example:8080/topics/t/resourcelist.xml",
    "HTTP://HUB.EXAMPLE:8080/x",
    "http://hub.example:8080",
    "http://user@hub.example:8080/userinfo-is-no-part-of-the-origin",
]
OTHER_ORIGINS = [
    "http://hub.example/topics/t",  # port 80
    "https://hub.example:8080/topics/t",  # another scheme
    "http://hub.example:8081/topics/t",
    "http://hub.example.evil:8080/topics/t",
    "http://evil.example/?u=http://hub.example:8080/",
    "http://hub.example:8080@evil.example/",  # userinfo, then the real host
    "ftp://hub.example:8080/",
    "http://hub.example:99999/",  # no port at all
    "http://hub.example:x/",
    "/topics/t",
    "",
]


@pytest.mark.parametrize("url", SAME_ORIGIN)
def test_the_token_goes_to_the_hubs_origin(url: str) -> None:
    token = HubToken(HUB, "tok")
    assert token.headers(url) == {"Authorization": "Bearer tok"}
    assert token.not_sent(url) == ""


@pytest.mark.parametrize("url", OTHER_ORIGINS)
def test_the_token_goes_nowhere_else(url: str) -> None:
    token = HubToken(HUB, "tok")
    assert token.headers(url) == {}
    assert token.not_sent(url) == " (the token goes only to the hub, http://hub.example:8080)"


def test_default_ports_are_the_same_origin() -> None:
    assert HubToken("https://hub.example", "t").goes_to("https://hub.example:443/x")
    assert HubToken("http://[::1]:80/", "t").goes_to("http://[::1]/x")
    assert not HubToken("http://[::1]:80/", "t").goes_to("http://127.0.0.1/x")


@pytest.mark.parametrize(
    "value,why",
    [
        ("", "empty"),
        ("a b", "a space"),
        ("a\nb", "U+000A"),
        ("a\rb", "U+000D"),
        ("tök", "U+00F6"),
        ("a\x7fb", "U+007F"),
    ],
)
def test_what_cannot_be_a_bearer_token_is_said(value: str, why: str) -> None:
    problem = token_problem(value)
    assert problem is not None and why in problem
    with pytest.raises(ValueError):
        HubToken(HUB, value)


def test_no_token_is_none() -> None:
    assert HubToken.of(HUB, None) is None and HubToken.of(HUB, "") is None
    assert HubToken.of(None, "x") is None and HubToken.of("ftp://h/", "x") is None
    assert isinstance(HubToken.of(HUB, "x"), HubToken)


def test_its_repr_hides_it() -> None:
    assert "s3cret" not in repr(HubToken(HUB, "s3cret"))


def forms(value: str) -> list[str]:
    return [value, quote(value, safe=""), json.dumps(value)[1:-1], repr(value)[1:-1]]


NAMED = ["r1", "eyJhbGciOiJIUzI1NiJ9.e30.sig", "a*b", "***", "*", "%", "\\", "'\"", "a%2Fb", "x"]


@pytest.mark.parametrize("value", NAMED)
def test_every_form_of_a_token_is_masked(value: str) -> None:
    token = HubToken(HUB, value)
    for form in forms(value):
        text = f"error: {form} and again{form}{form} at the end {form}"
        masked = token.mask(text)
        assert all(f not in masked for f in forms(value)), (form, masked)
        assert masked.startswith("error: ")


def test_fuzz_no_form_of_a_token_survives_masking() -> None:
    rng = random.Random(6750)
    visible = "".join(chr(c) for c in range(0x21, 0x7F))
    for _ in range(3000):
        value = "".join(rng.choice(visible) for _ in range(rng.randint(1, 24)))
        token = HubToken(HUB, value)
        pieces = []
        for _ in range(rng.randint(1, 6)):
            noise = "".join(rng.choice(visible + " \n") for _ in range(rng.randint(0, 8)))
            pieces += [noise, rng.choice(forms(value))]
        masked = token.mask("".join(pieces))
        assert all(f not in masked for f in forms(value)), (value, masked)


def test_the_log_filter_masks_messages_arguments_and_tracebacks() -> None:
    token = HubToken(HUB, "s3cret-token")
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(TokenMask(token))
    log = logging.getLogger("tests.hub_token")
    log.addHandler(handler)
    log.propagate = False
    try:
        log.warning("the hub said %r", "bad token s3cret-token")
        log.warning("plain s3cret-token")
        try:
            raise RuntimeError("failed with s3cret-token")
        except RuntimeError:
            log.exception("and a traceback")
    finally:
        log.removeHandler(handler)
        log.propagate = True
    text = out.getvalue()
    assert "s3cret" not in text and text.count("failed with ***") == 2, text  # and its source line
    assert "RuntimeError" in text


def test_printable_ascii_is_all_a_token_may_hold() -> None:
    assert token_problem(string.ascii_letters + string.digits + "-._~+/=") is None
    assert token_problem(string.punctuation) is None
