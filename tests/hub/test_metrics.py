"""``/metrics`` read with Prometheus's own parser while a real hub publishes and delivers.

Counters are per process (every hub of this test session shares them), so each test
compares a scrape taken before with one taken after.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from hub.core.placement import subscription_id
from hub.core.settings import Settings
from hub.store.embedded_redis import EmbeddedRedis
from tests.conftest import Hub, start_hub
from tests.hub.callback_server import CallbackServer
from tests.hub.scrape import Samples, scrape, value
from tests.hub.test_websub import hub_workers, subscribe
from tests.support import HubProcess, changes, free_port, notification, wait_for


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    # A short heartbeat: an SSE client that went away is noticed at the next write.
    return {
        "retry_base_seconds": 0.05,
        "retry_max_seconds": 0.2,
        "suspend_after_failures": 2,
        "heartbeat_seconds": 0.3,
    }


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


async def test_publish_counters_histograms_and_route_labels(hub: Hub) -> None:
    before = await scrape(hub)
    body = notification(changes(3))
    resp = await hub.publish("news", body, **{"Idempotency-Key": "k1"})
    assert resp.status == 202
    assert (await hub.publish("news", body, **{"Idempotency-Key": "k1"})).status == 202
    assert (await hub.publish("news", b"<not-xml")).status == 400
    resp = await hub.session.post(
        f"{hub.url}/topics/news", data=body, headers={"Content-Type": "text/csv"}
    )
    assert resp.status == 415
    after = await scrape(hub)

    assert delta(before, after, "rshub_publishes_total", result="accepted") == 1
    assert delta(before, after, "rshub_publishes_total", result="replayed") == 1
    assert delta(before, after, "rshub_publishes_total", result="4xx") == 2
    assert delta(before, after, "rshub_changes_accepted_total") == 3
    assert delta(before, after, "rshub_ingested_bytes_total") == len(body)
    assert delta(before, after, "rshub_publish_duration_seconds_count") == 4
    # Requests are labelled by the route's pattern, never by the raw path.
    http = "rshub_http_request_duration_seconds_count"
    assert delta(before, after, http, method="POST", route="/topics/{name}", status="202") == 2
    assert delta(before, after, http, method="POST", route="/topics/{name}", status="415") == 1
    assert not any("/topics/news" in dict(labels).get("route", "") for _, labels in after)
    # Scrape-time series from Redis.
    assert value(after, "rshub_stream_length", topic="news") == 3
    assert value(after, "rshub_topics") == 1


async def test_request_id_is_returned_and_echoed(hub: Hub) -> None:
    resp = await hub.session.get(f"{hub.url}/healthz")
    generated = resp.headers["X-Request-Id"]
    assert len(generated) >= 8
    resp = await hub.session.get(f"{hub.url}/healthz", headers={"X-Request-Id": "abc-123"})
    assert resp.headers["X-Request-Id"] == "abc-123"
    bad = "bad id; drop table"
    resp = await hub.session.get(f"{hub.url}/nowhere", headers={"X-Request-Id": bad})
    assert resp.status == 404 and resp.headers["X-Request-Id"] not in ("", bad)


async def test_delivery_counters_never_decrease_when_a_subscription_ends(hub: Hub) -> None:
    # 500, 500 (suspended after 2 failures), then 2xx, then 410 on the next delivery.
    cb = await CallbackServer(statuses=[500, 500]).start()
    try:
        before = await scrape(hub)
        await subscribe(hub, cb)
        ids = (await (await hub.publish("t", notification(changes(2)))).json())["ids"]
        await wait_for(lambda: cb.ids == ids)
        during = await scrape(hub)
        assert delta(before, during, "rshub_delivered_changes_total") == 2
        assert delta(before, during, "rshub_deliveries_total", outcome="2xx") == 1
        assert delta(before, during, "rshub_deliveries_total", outcome="retry") == 2
        assert delta(before, during, "rshub_deliveries_total", outcome="suspended") == 1
        # one observation per delivery (the 2xx one), not per change
        assert delta(before, during, "rshub_delivery_latency_seconds_count") == 1
        # The subscription ends (410): its delivered changes stay counted.
        cb.statuses = [410]
        await hub.publish("t", notification(changes(1, start=2)))
        await wait_for(lambda: not hub_workers(hub))
        after = await scrape(hub)
        assert delta(before, after, "rshub_deliveries_total", outcome="410") == 1
        for name, labels in during:
            if name.endswith(("_total", "_count", "_sum", "_bucket")) and name.startswith("rshub_"):
                assert after.get((name, labels), 0.0) >= during[(name, labels)], (name, labels)
        assert value(after, "rshub_subscriptions", state="active") == 0
    finally:
        await cb.stop()


async def test_lag_gauges_for_a_stalled_subscriber(hub: Hub) -> None:
    cb = await CallbackServer(statuses=[503] * 1000).start()
    try:
        await subscribe(hub, cb)
        await hub.publish("t", notification(changes(5)))
        await wait_for(lambda: cb.refused >= 1)
        samples = await scrape(hub)
        sub = subscription_id("t", cb.url)
        assert value(samples, "rshub_subscription_lag_events", topic="t", subscription=sub) == 5
        assert value(samples, "rshub_subscription_lag_seconds", topic="t", subscription=sub) >= 0
        resp = await hub.session.get(f"{hub.url}/admin/overview.json")
        [row] = (await resp.json())["subscriptions"]
        assert row["lag_events"] == 5 and row["last_error"] == "HTTP 503"
    finally:
        await cb.stop()


async def test_stream_clients_and_messages(hub: Hub) -> None:
    before = await scrape(hub)
    async with hub.session.get(f"{hub.url}/topics/live/events") as sse:
        assert sse.status == 200
        await wait_for(lambda: _stream_clients(hub, "sse", before))
        await hub.publish("live", notification(changes(1)))
        async with asyncio.timeout(5):
            while b"data:" not in await sse.content.readline():
                pass
        during = await scrape(hub)
        assert delta(before, during, "rshub_stream_clients", transport="sse") == 1
        assert delta(before, during, "rshub_stream_messages_total", transport="sse") >= 1
    await wait_for(lambda: _stream_clients(hub, "sse", before, expected=0))


async def _stream_clients(hub: Hub, transport: str, before: Samples, expected: int = 1) -> bool:
    now = await scrape(hub)
    return delta(before, now, "rshub_stream_clients", transport=transport) == expected


def test_multiprocess_mode_sums_live_series(tmp_path: Path) -> None:
    """With PROMETHEUS_MULTIPROC_DIR a hub process writes its series there; /metrics reads
    them all (here: one process, restarted, so two processes' counters are summed)."""
    prom_dir = tmp_path / "prom"
    prom_dir.mkdir()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(prom_dir)}
    accepted = []
    for _round in range(2):
        hub = HubProcess(str(tmp_path), None, env=env).start()
        try:
            req = urllib.request.Request(
                f"{hub.url}/topics/mp",
                data=notification(changes(2)),
                headers={"Content-Type": "application/xml"},
            )
            with urllib.request.urlopen(req, timeout=5) as resp:
                assert resp.status == 202
            with urllib.request.urlopen(f"{hub.url}/metrics", timeout=5) as resp:
                text = resp.read().decode()
        finally:
            hub.stop()
        from prometheus_client.parser import text_string_to_metric_families

        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == "rshub_changes_accepted_total":
                    accepted.append(sample.value)
    assert accepted == [2, 4]
    assert any(name.endswith(".db") for name in os.listdir(prom_dir))


async def test_metrics_answer_while_redis_is_down(tmp_path: Path) -> None:
    redis = EmbeddedRedis(tmp_path / "redis")
    redis.start()
    settings = Settings(host="127.0.0.1", port=free_port())
    runner, _app = await start_hub(settings, redis.url)
    try:
        async with aiohttp.ClientSession() as session:
            hub = Hub(settings.public_url, _app, settings, session)
            before = await scrape(hub)
            redis.stop()
            down = await scrape(hub)  # live series only, and the failed read counted
            assert ("rshub_subscriptions", frozenset({("state", "active")})) not in down
            assert delta(before, down, "rshub_redis_errors_total") >= 1
            assert ("rshub_publishes_total", frozenset({("result", "5xx")})) in down
    finally:
        await runner.cleanup()
        redis.stop()


async def test_overview_json_needs_a_hub_wide_token(redis_url: str) -> None:
    settings = Settings(
        host="127.0.0.1", port=free_port(), tokens=["op"], topic_tokens={"a": ["ta"]}
    )
    runner, _app = await start_hub(settings, redis_url)
    try:
        async with aiohttp.ClientSession() as session:
            url = f"{settings.public_url}/admin/overview.json"
            assert (await session.get(url)).status == 401
            topic_only = {"Authorization": "Bearer ta"}
            assert (await session.get(url, headers=topic_only)).status == 403
            resp = await session.get(url, headers={"Authorization": "Bearer op"})
            assert resp.status == 200
            assert json.loads(await resp.text())["redis_ok"] is True
    finally:
        await runner.cleanup()


def test_backlog_counting_stays_within_a_budget_per_scrape() -> None:
    from hub.store.stream_stats import BACKLOG_BUDGET, BACKLOG_CAP, backlog_cap

    assert backlog_cap(1) == BACKLOG_CAP
    assert backlog_cap(1000) * 1000 <= BACKLOG_BUDGET
    assert backlog_cap(10**6) == 100
