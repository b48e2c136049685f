"""hub.core.topics: names, the URL map and Link headers, as plain data."""

from __future__ import annotations

import pytest

from hub.core.exceptions import BadRequest
from hub.core.topics import HubUrls, check_name, loopback_aliases, parse_link_header

URLS = HubUrls("http://hub.example:8080/prefix")


@pytest.mark.parametrize("name", ["a", "A.b_c-9", "x" * 128, "0news"])
def test_valid_names(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "-a", ".a", "a/b", "a b", "x" * 129, "é", "a{b}"])
def test_invalid_names_name_the_rule(name: str) -> None:
    with pytest.raises(BadRequest, match="invalid topic name"):
        check_name(name)


def test_every_url_is_built_from_the_public_base() -> None:
    assert URLS.hub == "http://hub.example:8080/prefix/"
    assert URLS.source_description == "http://hub.example:8080/prefix/.well-known/resourcesync"
    assert URLS.topic("t") == "http://hub.example:8080/prefix/topics/t"
    assert URLS.capabilitylist("t").endswith("/topics/t/capabilitylist.xml")
    assert URLS.changelist_index("t").endswith("/topics/t/changelist.xml")
    assert URLS.changelist_page("t", 7).endswith("/topics/t/changelist/00000007.xml")
    assert URLS.resourcelist("t").endswith("/topics/t/resourcelist.xml")
    assert URLS.resourcelist_page("t", "123", 4).endswith("/topics/t/resourcelist/123-00004.xml")


def test_changelist_pages_sort_lexically_in_page_order() -> None:
    pages = [URLS.changelist_page("t", n) for n in (1, 2, 10, 100, 9)]
    assert sorted(pages) == [URLS.changelist_page("t", n) for n in (1, 2, 9, 10, 100)]


def test_etag_tag_depends_on_the_base() -> None:
    assert URLS.tag == HubUrls("http://hub.example:8080/prefix").tag
    assert URLS.tag != HubUrls("http://other.example").tag


def test_own_topic_url_names_its_topic() -> None:
    assert URLS.is_own_topic(URLS.topic("news"))
    assert URLS.name_from_url(URLS.topic("news")) == "news"
    with pytest.raises(BadRequest):
        URLS.name_from_url(URLS.topic("bad/name"))


def test_foreign_topic_urls_get_a_stable_derived_name() -> None:
    a = URLS.name_from_url("https://source.example/feed?x=1")
    assert a == URLS.name_from_url("https://source.example/feed?x=1")
    assert a.startswith("source.example-")
    assert a != URLS.name_from_url("https://source.example/feed?x=2")
    check_name(a)


@pytest.mark.parametrize("url", ["ftp://x/y", "notaurl", "http:///path", ""])
def test_topic_urls_must_be_absolute_http(url: str) -> None:
    with pytest.raises(BadRequest, match="absolute http"):
        URLS.name_from_url(url)


def test_links_header_round_trips() -> None:
    header = URLS.links(URLS.topic("t"))
    assert parse_link_header([header]) == {"hub": URLS.hub, "self": URLS.topic("t")}


def test_parse_link_header_forms() -> None:
    values = [
        '<http://a/>; rel="hub self", <http://b/>; rel=alternate',
        "<http://c/> ; title=x; REL=Next",
        '<http://d/>; rel="hub"',
    ]
    assert parse_link_header(values) == {
        "hub": "http://a/",
        "self": "http://a/",
        "alternate": "http://b/",
        "next": "http://c/",
    }
    assert parse_link_header(["garbage", "<x>"]) == {}


def test_alias_bases_name_the_same_topics() -> None:
    urls = HubUrls("http://localhost:8080", ("http://127.0.0.1:8088", "https://hub.example/rs"))
    assert urls.name_from_url("http://localhost:8080/topics/t") == "t"
    assert urls.name_from_url("http://127.0.0.1:8088/topics/t") == "t"
    assert urls.name_from_url("HTTP://LOCALHOST:8080/topics/t") == "t"
    assert urls.name_from_url("https://HUB.example:443/rs/topics/news") == "news"
    assert urls.is_own_topic("http://127.0.0.1:8088/topics/t")
    # A hub topic URL (/topics/{name}) on another port or host is refused, naming the
    # bases this hub knows: a derived topic would silently be another one.
    for stray in (
        "http://127.0.0.1:9999/topics/t",
        "https://hub.example/topics/t",
        "http://elsewhere.example/topics/t",
        "http://elsewhere.example/rs/topics/t",
    ):
        assert not urls.is_own_topic(stray)
        with pytest.raises(BadRequest) as refused:
            urls.name_from_url(stray)
        message = str(refused.value)
        assert "http://localhost:8080/topics/" in message
        assert "http://127.0.0.1:8088" in message and "https://hub.example/rs" in message
    # A Source's own topic URL on any other path is a foreign topic: a derived name.
    for foreign in (
        "http://elsewhere.example/feed/topics",
        "http://elsewhere.example/topics/t/changes.xml",
        "http://elsewhere.example/topics/",
        "http://127.0.0.1:9999/news",
    ):
        assert urls.name_from_url(foreign) not in ("t", "news")
    # Links are built from the public base only.
    assert urls.topic("t") == "http://localhost:8080/topics/t"


def test_a_request_may_add_an_alias() -> None:
    urls = HubUrls("http://localhost:8080")
    seen = urls.with_alias("https://proxy.example")
    assert seen.name_from_url("https://proxy.example/topics/t") == "t"
    assert not urls.is_own_topic("https://proxy.example/topics/t")
    assert seen.with_alias("https://proxy.example") is seen


def test_a_malformed_name_under_an_alias_is_refused() -> None:
    urls = HubUrls("http://localhost:8080", ("http://127.0.0.1:8088",))
    with pytest.raises(BadRequest, match="invalid topic name"):
        urls.name_from_url("http://127.0.0.1:8088/topics/a/b")


def test_a_hub_on_loopback_is_every_loopback_name_on_its_port() -> None:
    assert loopback_aliases("127.0.0.1", 8080) == (
        "http://localhost:8080",
        "http://127.0.0.1:8080",
        "http://[::1]:8080",
    )
    assert loopback_aliases("::1", 9) == loopback_aliases("localhost", 9)
    assert loopback_aliases("0.0.0.0", 8080) == ()
    assert loopback_aliases("hub.example", 8080) == ()
    urls = HubUrls("http://127.0.0.1:8080", loopback_aliases("127.0.0.1", 8080))
    for name in ("localhost", "127.0.0.1", "[::1]", "LOCALHOST"):
        assert urls.name_from_url(f"http://{name}:8080/topics/demo") == "demo"
    with pytest.raises(BadRequest, match="does not know"):
        urls.name_from_url("http://localhost:8081/topics/demo")
