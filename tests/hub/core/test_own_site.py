"""hub.core.own_site: the names and origins a hub without tokens takes browser requests
under, as plain data (the hub's answers: tests/hub/test_own_site.py)."""

from __future__ import annotations

from typing import Any

import pytest

from hub.core.exceptions import Forbidden
from hub.core.own_site import OwnSite, host_of, origin_of

SITE = OwnSite(
    ("https://hub.example", "http://rshub.test:8080", "http://127.0.0.1:8080"),
    listen_host="myhost",
    cors_origins=("https://app.example", "*"),
)


def check(**given: Any) -> None:
    headers: dict[str, Any] = {"hosts": [], "origins": [], "fetch_sites": [], "scheme": "http"}
    SITE.check(**{**headers, **given})


def refused(header: str, **given: Any) -> str:
    with pytest.raises(Forbidden) as caught:
        check(**given)
    assert caught.value.detail == {"header": header}
    assert header in caught.value.message
    return caught.value.message


@pytest.mark.parametrize(
    "host",
    [
        "localhost:8080",
        "LOCALHOST:8080",
        "localhost.:8080",
        "localhost:9000",  # a tunnel (ssh -L 9000:localhost:8080)
        "127.0.0.1:8080",
        "127.0.0.1",
        "127.0.0.2:8080",
        "[::1]:8080",
        "[::ffff:127.0.0.1]:8080",
        "192.0.2.7:8080",  # an address: no DNS answer moves it
        "hub.example",
        "rshub.test:8080",
        "myhost:8080",
    ],
)
def test_the_hub_s_own_names_and_addresses(host: str) -> None:
    assert SITE.names_host(host)
    check(hosts=[host])


@pytest.mark.parametrize(
    "host",
    [
        "evil.example:8080",
        "evil.example",
        "localhost.evil.example:8080",
        "hub.example.evil.example",
        "127.0.0.1.evil.example:8080",
        "127.0.0.1@evil.example",
        "evil.example#@localhost",
        "localhost:8080/x",
        "localhost:",
        "localhost:99999",
        "[::1",
        "",
        "localhost\udcfe",
        "2130706433:8080",  # not an address as browsers write one: a name
    ],
)
def test_other_names_are_refused_naming_host(host: str) -> None:
    assert not SITE.names_host(host)
    message = refused("Host", hosts=[host])
    assert "--alias-url" in message and ascii(host[:100]) in message


@pytest.mark.parametrize(
    ("host", "origin"),
    [
        ("127.0.0.1:8080", "http://127.0.0.1:8080"),  # the dashboard's own page
        ("localhost:9000", "http://localhost:9000"),  # the same, through a tunnel
        ("[::1]:8080", "http://[::1]:8080"),
        ("localhost", "http://localhost:80"),
        ("127.0.0.1:8080", "https://hub.example"),  # the public base
        ("127.0.0.1:8080", "https://hub.example:443"),
        ("127.0.0.1:8080", "http://rshub.test:8080"),  # an alias
        ("127.0.0.1:8080", "https://app.example"),  # listed in RSHUB_CORS_ORIGINS
    ],
)
def test_the_hub_s_own_origins_and_listed_ones(host: str, origin: str) -> None:
    check(hosts=[host], origins=[origin], fetch_sites=["same-origin"])


@pytest.mark.parametrize(
    "origin",
    [
        "https://evil.example",
        "null",
        "http://127.0.0.1:3000",  # another server on this machine
        "http://localhost:8081",
        "https://127.0.0.1:8080",  # another scheme is another origin
        "http://hub.example",  # the public base is https
        "https://app.example.evil.example",
        "https://app.example/path",
        "",
    ],
)
def test_other_origins_are_refused_naming_origin(origin: str) -> None:
    message = refused("Origin", hosts=["127.0.0.1:8080"], origins=[origin])
    assert "RSHUB_CORS_ORIGINS" in message


def test_a_wildcard_in_cors_origins_lets_no_page_act() -> None:
    assert OwnSite((), cors_origins=("*",)).cors == frozenset()
    refused("Origin", hosts=["127.0.0.1:8080"], origins=["https://anyone.example"])


def test_every_value_of_a_repeated_header_must_pass() -> None:
    refused("Host", hosts=["localhost:8080", "evil.example:8080"])
    refused("Origin", origins=["http://127.0.0.1:8080", "https://evil.example"])


def test_a_cross_site_request_without_origin_is_refused() -> None:
    refused("Sec-Fetch-Site", hosts=["127.0.0.1:8080"], fetch_sites=["cross-site"])
    refused("Sec-Fetch-Site", fetch_sites=[" Cross-Site "])
    for site in ("same-origin", "same-site", "none"):
        check(hosts=["127.0.0.1:8080"], fetch_sites=[site])
    # An Origin that passed says which page it is: a listed origin is cross-site.
    check(hosts=["127.0.0.1:8080"], origins=["https://app.example"], fetch_sites=["cross-site"])


def test_no_browser_header_at_all_is_a_tool() -> None:
    check()


def test_a_trusted_proxy_s_request_is_checked_by_its_origin_only() -> None:
    check(hosts=None, origins=["https://proxy.example"], forwarded="https://proxy.example/")
    refused("Origin", hosts=None, origins=["https://evil.example"], forwarded="https://p.example")
    refused("Sec-Fetch-Site", hosts=None, fetch_sites=["cross-site"])


def test_host_and_origin_parsing() -> None:
    assert host_of("[::1]:8080") == ("::1", 8080)
    assert host_of("Hub.Example.") == ("hub.example", None)
    assert host_of("a b") is None
    assert origin_of("HTTPS://Hub.Example") == ("https", "hub.example", 443)
    assert origin_of("http://[::1]:80") == ("http", "::1", 80)
    assert origin_of("null") is None and origin_of("ftp://x") is None
