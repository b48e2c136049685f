"""Plain WebSub topics, sans I/O: which topics are plain, and a topic's Content-Type rule."""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime

import orjson
import pytest

from hub.core.topic_content import (
    MAX_CONTENT_TYPE_CHARS,
    PlainTopics,
    TopicContent,
    content_change,
    content_type_problem,
)
from hub.core.topics import HubUrls

TCHAR = set("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def reference(value: str) -> bool:
    """RFC 9110 §8.3.1 media-type, read character by character (ASCII only): the regular
    expression's verdict must be this one's."""
    i, n = 0, len(value)

    def token() -> bool:
        nonlocal i
        start = i
        while i < n and value[i] in TCHAR:
            i += 1
        return i > start

    def ows() -> None:
        nonlocal i
        while i < n and value[i] in " \t":
            i += 1

    if not token() or i >= n or value[i] != "/":
        return False
    i += 1
    if not token():
        return False
    while True:
        ows()
        if i == n:
            return True
        if value[i] != ";":
            return False
        i += 1
        ows()
        if i == n or value[i] == ";":
            continue  # an empty parameter
        if not token() or i >= n or value[i] != "=":
            return False
        i += 1
        if i < n and value[i] == '"':
            i += 1
            while i < n and value[i] != '"':
                if value[i] == "\\":
                    i += 1
                    if i >= n or not (value[i] == "\t" or " " <= value[i] <= "~"):
                        return False
                elif not (value[i] == "\t" or " " <= value[i] <= "~"):
                    return False
                i += 1
            if i >= n:
                return False
            i += 1
        elif not token():
            return False


@pytest.mark.parametrize(
    "value",
    [
        "text/plain",
        "text/plain;charset=UTF-8",
        "text/html; charset=UTF-8",
        "application/json",
        'multipart/mixed; boundary="a b;c"',
        "application/atom+xml;type=entry;charset=utf-8",
        "text/plain ;  charset=utf-8 ",
        "text/plain;",
        'a/b; q="\\"quoted\\""',
    ],
)
def test_media_types_are_kept_as_they_are(value: str) -> None:
    assert content_type_problem(value) is None and reference(value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "text",
        "text/",
        "/plain",
        "text/plain, text/html",
        "text/plain; charset",
        "text/plain; charset=",
        'text/plain; a="open',
        "text/plain; a=b c",
        "t\u00e9xt/plain",
        "text/plain; a=\u00e9",
        " text/plain",
        "text/plain\r\nX-Injected: 1",
    ],
)
def test_what_is_not_one_media_type_is_refused(value: str) -> None:
    problem = content_type_problem(value)
    assert problem is not None and "not one media type" in problem
    assert not reference(value)


def test_a_long_content_type_is_refused_by_its_length() -> None:
    value = "text/plain; a=" + "b" * MAX_CONTENT_TYPE_CHARS
    assert "longer than 512 characters" in (content_type_problem(value) or "")


def test_no_value_takes_long_to_judge() -> None:
    """Whitespace runs between parameters cannot be split two ways (no backtracking)."""
    worst = ["a/b" + "; " * 250 + "\u00e9", "a/b" + " ;\t" * 160 + "!", 'a/b;c="' + "\\" * 500]
    for value in worst:
        started = time.perf_counter()
        assert content_type_problem(value[:MAX_CONTENT_TYPE_CHARS]) is not None
        assert time.perf_counter() - started < 0.01


def test_a_seeded_fuzz_agrees_with_the_reference() -> None:
    rng = random.Random(20261202)
    alphabet = 'ab/;= \t"\\,é\x00\x7f' + "".join(sorted(TCHAR))[:20]
    seeds = ["text/plain;charset=UTF-8", 'a/b; c="d\\"e"', "x/y ; p=q ; r=s"]
    agreed = {True: 0, False: 0}
    for _ in range(20_000):
        value = list(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            at = rng.randint(0, len(value))
            if rng.random() < 0.5 and value:
                del value[min(at, len(value) - 1)]
            else:
                value.insert(at, rng.choice(alphabet))
        text = "".join(value)
        verdict = content_type_problem(text) is None
        assert verdict == reference(text), text
        agreed[verdict] += 1
    assert agreed[True] > 1000 and agreed[False] > 1000


def test_plain_topics_by_name_and_by_prefix_of_other_sites() -> None:
    plain = PlainTopics(["notes", "http://127.0.0.1:", "https://blog.example/feeds/"])
    urls = HubUrls("http://127.0.0.1:8080")
    assert plain.covers("notes", urls.topic("notes"))
    # A hub on loopback: its own topics are plain by name only, whatever a prefix says.
    assert not plain.covers("news", urls.topic("news"))
    assert not plain.covers("news", "http://localhost:8080/topics/news")
    feed = "https://blog.example/feeds/a.atom"
    assert plain.covers(urls.name_from_url(feed), feed)
    other = "https://blog.example/other"
    assert not plain.covers(urls.name_from_url(other), other)
    site = "http://127.0.0.1:9999/hub/105/pub/x"
    assert plain.covers(urls.name_from_url(site), site)
    assert not PlainTopics([]) and PlainTopics(["x"])


def test_a_content_is_stored_as_a_change_of_its_topic_url() -> None:
    content = TopicContent(b"hello", "text/plain;charset=UTF-8")
    change = content_change(content, "https://blog.example/f", datetime(2026, 1, 2, tzinfo=UTC))
    assert change.loc == "https://blog.example/f" and change.change == "updated"
    assert orjson.loads(change.event) == {
        "loc": "https://blog.example/f",
        "lastmod": "2026-01-02T00:00:00Z",
        "change": "updated",
        "hash": "sha-256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
        "length": 5,
        "type": "text/plain;charset=UTF-8",
    }
    assert content.same_as((content.digest, "text/plain;charset=UTF-8"))
    assert not content.same_as((content.digest, "text/plain"))
