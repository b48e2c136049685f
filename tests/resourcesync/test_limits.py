"""Parse limits: each is checked before the work it bounds, and named when exceeded."""

from __future__ import annotations

import pickle
import time

import pytest

from resourcesync import (
    DocumentTooLargeError,
    LimitExceededError,
    Limits,
    ValidationError,
    parse,
)

HEAD = (
    '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/">'
    '<rs:md capability="changelist-notification"/>'
)


def doc(*urls: str) -> bytes:
    return (HEAD + "".join(urls) + "</urlset>").encode()


def url(loc: str = "http://e.org/x", md: str = 'change="updated"', extra: str = "") -> str:
    return f"<url><loc>{loc}</loc><lastmod>2026-01-01T00:00:00Z</lastmod><rs:md {md}/>{extra}</url>"


def test_fifty_thousand_attributes_fail_fast_naming_the_limit() -> None:
    """Reading them would take lxml 10+ seconds (quadratic); counting them takes ms."""
    attrs = " ".join(f'a{i}="v"' for i in range(50_000))
    body = doc(url(md=f'change="updated" {attrs}'))
    started = time.perf_counter()
    with pytest.raises(LimitExceededError) as err:
        parse(body)
    assert time.perf_counter() - started < 2.0
    assert err.value.limit == "max_attributes" and err.value.rule == "limit.max_attributes"
    assert err.value.value == 50_001 and err.value.index == 0
    assert "max_attributes" in str(err.value) and err.value.http_status == 400


def test_attributes_at_the_limit_are_fine() -> None:
    attrs = " ".join(f'a{i}="v"' for i in range(63))
    assert len(parse(doc(url(md=f'change="updated" {attrs}'))).entries) == 1


@pytest.mark.parametrize(
    "body,limit",
    [
        (doc(url(md='change="updated" type="' + "x" * 9000 + '"')), "max_value_chars"),
        (doc(url(loc="http://e.org/" + "x" * 9000)), "max_value_chars"),
        (doc(url(extra='<rs:ln rel="alternate" href="http://e.org/a"/>' * 1025)), "max_links"),
        (doc(url(), url()), "max_entries"),
    ],
)
def test_each_limit_is_named(body: bytes, limit: str) -> None:
    limits = Limits(max_entries=1)
    with pytest.raises(LimitExceededError) as err:
        parse(body, limits=limits)
    assert err.value.limit == limit and limit in str(err.value)


def test_limits_apply_without_validation() -> None:
    with pytest.raises(LimitExceededError):
        parse(doc(url(), url()), validate=False, limits=Limits(max_entries=1))


@pytest.mark.parametrize(
    "error",
    [
        LimitExceededError("max_links", 2000, 1024, "<rs:ln> in one entry"),
        ValidationError("entry.loc-required", "changelist", 3, "no loc"),
        DocumentTooLargeError(10, 5),
    ],
)
def test_errors_pickle(error: Exception) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and str(copy) == str(error)
    assert vars(copy) == vars(error)
