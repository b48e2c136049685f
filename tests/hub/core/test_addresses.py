"""hub.core.addresses: which URLs are well-formed and which addresses the hub may connect to."""

from __future__ import annotations

import pytest

from hub.core.addresses import check_http_url, is_public, refusal
from hub.core.exceptions import BadRequest
from rsclient.host_names import ascii_host


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "8.8.8.8", "2606:2800:220:1:248:1893:25c8:1946", "2a00:1450::1"]
)
def test_public(address: str) -> None:
    assert is_public(address)
    assert refusal(address) is None


@pytest.mark.parametrize(
    "address,why",
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "reserved"),
        ("169.254.169.254", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("255.255.255.255", "private"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1%eth0", "link-local"),
        ("fc00::1", "private"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "IPv4-mapped"),
        ("::ffff:10.0.0.1", "IPv4-mapped"),
        ("::ffff:93.184.216.34", "IPv4-mapped"),
        ("64:ff9b::7f00:1", "NAT64"),
        ("64:ff9b::5db8:d822", "NAT64"),
        ("64:ff9b:1::a00:1", "NAT64"),
        ("::127.0.0.1", "IPv4-compatible"),
        ("::10.0.0.1", "IPv4-compatible"),
        ("2002:7f00:1::1", "6to4"),
        ("2002:5db8:d822::1", "6to4"),
        ("2001:db8::1", "private"),
        ("not-an-ip", "not an IP"),
    ],
)
def test_refused(address: str, why: str) -> None:
    assert not is_public(address)
    assert why in (refusal(address) or "")


@pytest.mark.parametrize(
    "url",
    [
        "http://example.org/cb",
        "https://example.org:8443/cb?x=1",
        "http://[::1]/x",
        "http://bücher.example/x",
    ],
)
def test_good_urls(url: str) -> None:
    assert check_http_url(url, "hub.callback").hostname


@pytest.mark.parametrize(
    "url,says",
    [
        ("", "required"),
        ("http://[::1/x", "not a valid URL"),
        ("http://example.org:99999/", "not a valid URL"),
        ("http://example.org/a\r\nX: 1", "control characters"),
        ("http://example.org/a b", "control characters"),
        ("http://example.org/\x00", "control characters"),
        ("http://example.org/\x85", "control characters"),
        ("http://example.org/a\u2028forged", "control characters"),
        ("ftp://example.org/", "absolute http(s)"),
        ("/relative", "absolute http(s)"),
        ("http:///nohost", "absolute http(s)"),
        ("http://user:pw@example.org/", "credentials"),
        ("http://example.org/" + "a" * 3000, "longer than"),
        # Names the resolver's IDNA step would fail on with a UnicodeError (a 500 once).
        ("http://" + "a" * 64 + ".invalid/", "a label longer than 63"),
        ("http://" + "a" * 2000 + "/", "longer than 253"),
        ("http://a..invalid/", "an empty label"),
        ("http://.invalid/", "an empty label"),
        ("http://" + "a." * 127 + "invalid/", "longer than 253"),
        ("http://" + "ä" * 70 + ".invalid/", "internationalized domain name"),
    ],
)
def test_bad_urls(url: str, says: str) -> None:
    with pytest.raises(BadRequest) as err:
        check_http_url(url, "hub.callback")
    assert says in err.value.message and "hub.callback" in err.value.message


@pytest.mark.parametrize(
    "url", ["http://cb.invalid./x", "http://" + "a" * 63 + ".invalid/", "http://bücher.invalid/"]
)
def test_host_names_at_their_limits_are_good(url: str) -> None:
    assert check_http_url(url, "hub.callback").hostname


def test_every_host_the_check_passes_can_be_looked_up() -> None:
    """Seeded fuzz: whatever host check_http_url lets through, the resolver's own encoding
    (what getaddrinfo does to a str) takes without a UnicodeError, once as_uri's form."""
    import random

    rng = random.Random(2211)
    alphabet = ["a", "b", "-", ".", "ä", "ß", "xn--", "1", "‍", "."]
    passed = 0
    for _ in range(3000):
        host = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 90)))
        try:
            parts = check_http_url(f"http://{host}/x", "hub.callback")
        except BadRequest:
            continue
        passed += 1
        name = ascii_host(parts.hostname or "")
        name.encode("idna")  # raises UnicodeError for a label Python's resolver refuses
    assert passed > 100
