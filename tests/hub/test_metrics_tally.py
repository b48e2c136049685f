"""Publish metrics kept as plain sums and added to the series before each read (a cut in the
publish path's CPU): ``/metrics`` and any read of the registry on the loop's thread still
show every publish, value by value as prometheus_client's own updates would.
"""

from __future__ import annotations

import random

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Histogram

from hub.core import metrics
from tests.conftest import Hub
from tests.hub.scrape import scrape
from tests.hub.test_lean_publish import Conn, LeanSpy, lean_spy, once, request, via_aiohttp
from tests.hub.test_metrics import delta
from tests.support import changes, notification

__all__ = ["lean_spy"]  # the fixture

_ROUTE = "/topics/{name}"
_HISTOGRAMS = (
    ("rshub_publish_duration_seconds", {}),
    ("rshub_http_request_duration_seconds", {"method": "POST", "route": _ROUTE, "status": "202"}),
)


def _histogram(name: str, labels: dict[str, str]) -> dict[str, float]:
    """Each bucket's count, the count and the sum, read from the registry."""
    out: dict[str, float] = {}
    for family in REGISTRY.collect():
        for sample in family.samples:
            rest = {k: v for k, v in sample.labels.items() if k != "le"}
            if sample.name.startswith(name) and rest == labels:
                out[sample.name + sample.labels.get("le", "")] = sample.value
    return out


def test_tallied_publishes_read_as_observed_ones() -> None:
    """A seeded run of publish times (in every bucket, on the bounds, beyond the last)
    tallied, then read from the registry: each bucket, count and sum moved as a fresh
    prometheus_client Histogram fed the same values by ``observe`` shows."""
    metrics.import_library()
    metrics.load()
    rng = random.Random(22)
    bounds = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600]
    times = [rng.choice([*bounds, 4000.0]) for _ in range(40)]
    times += [rng.uniform(0, 0.02) for _ in range(200)] + [rng.expovariate(0.1) for _ in range(60)]
    before = [_histogram(n, labels) for n, labels in _HISTOGRAMS]
    accepted = REGISTRY.get_sample_value("rshub_publishes_total", {"result": "accepted"}) or 0
    reference = Histogram("reference", "", buckets=bounds, registry=CollectorRegistry())
    for seconds in times:
        metrics.published(500, 2, False)
        metrics.publish_timed("POST", _ROUTE, 202, seconds)
        reference.observe(seconds)
    expected = {
        s.name.replace("reference", "") + s.labels.get("le", ""): s.value
        for s in reference.collect()[0].samples
        if not s.name.endswith("_created")
    }
    now = REGISTRY.get_sample_value("rshub_publishes_total", {"result": "accepted"})
    assert now == accepted + len(times)
    for (name, labels), was in zip(_HISTOGRAMS, before, strict=True):
        after = _histogram(name, labels)
        moved = {
            key[len(name) :]: value - was.get(key, 0.0)
            for key, value in after.items()
            if not key.endswith("_created")
        }
        assert moved.keys() == expected.keys(), name
        for key, value in expected.items():
            assert moved[key] == pytest.approx(value, rel=1e-9, abs=1e-9), (name, key)


async def test_metrics_count_every_publish_of_both_paths_at_each_scrape(
    hub: Hub, lean_spy: LeanSpy
) -> None:
    """Publishes on a kept-alive lean connection (the first in a task, the rest without
    one), one handed to aiohttp and a replay, each scraped over HTTP (the exposition is
    rendered in a thread) as soon as answered: every counter and histogram exact."""
    conn = await Conn.open(hub)
    try:
        sizes = 0
        for i in range(12):
            before = await scrape(hub)
            body = notification(changes(2, start=2 * i))
            data = request(body, token=None)
            if i == 5:  # on a connection of its own: aiohttp keeps a connection it takes
                head, _ = await once(hub, via_aiohttp(data))
            else:
                head, _ = await conn.ask(data)
            assert head.startswith(b"HTTP/1.1 202 "), head
            after = await scrape(hub)
            sizes += len(body)
            assert delta(before, after, "rshub_publishes_total", result="accepted") == 1, i
            assert delta(before, after, "rshub_changes_accepted_total") == 2, i
            assert delta(before, after, "rshub_ingested_bytes_total") == len(body), i
            assert delta(before, after, "rshub_publish_duration_seconds_count") == 1, i
            http = "rshub_http_request_duration_seconds_count"
            labels = {"method": "POST", "route": _ROUTE, "status": "202"}
            assert delta(before, after, http, **labels) == 1, i
            assert delta(before, after, "rshub_publish_duration_seconds_bucket", le="+Inf") == 1
        assert len(lean_spy.served) == 11  # the sixth went to aiohttp
        before = await scrape(hub)
        replay = request(notification(changes(1)), token=None, extra="Idempotency-Key: k\r\n")
        for _ in range(2):
            head, _ = await conn.ask(replay)
            assert head.startswith(b"HTTP/1.1 202 "), head
        after = await scrape(hub)
        assert delta(before, after, "rshub_publishes_total", result="accepted") == 1
        assert delta(before, after, "rshub_publishes_total", result="replayed") == 1
        assert delta(before, after, "rshub_publish_duration_seconds_count") == 2
    finally:
        conn.close()


def test_the_tally_is_added_in_place_only_where_prometheus_client_keeps_it_so() -> None:
    """The flush adds to the histograms' sum and bucket values; a prometheus_client laid out
    otherwise has each publish observed one by one instead of a flush that would break."""
    assert metrics._adds_in_place(metrics.PUBLISH_SECONDS)
    assert metrics._adds_in_place(metrics._http_child("POST", _ROUTE, 202))
    assert not metrics._adds_in_place(object())
    other = Histogram("other_layout", "", buckets=(1.0, 2.0), registry=CollectorRegistry())
    assert not metrics._adds_in_place(other)  # not the hub's buckets
