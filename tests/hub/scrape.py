"""Reading the hub's ``/metrics`` the way Prometheus does (prometheus_client's parser)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Hub

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(hub: Hub) -> Samples:
    """Every sample of ``GET /metrics``: (name, labels) -> value."""
    resp = await hub.session.get(f"{hub.url}/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain")
    out: Samples = {}
    for family in text_string_to_metric_families(await resp.text()):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (0 when the series does not exist yet)."""
    return samples.get((name, frozenset(labels.items())), 0.0)
