"""hub.core.overview and hub.core.metrics' scrape-time series: ranking, folding, bounded labels."""

from __future__ import annotations

from hub.core.metrics import overview_families
from hub.core.overview import OTHERS, Overview, SubscriptionRow, TopicRow, lag_seconds, top


def _topic(name: str, length: int) -> TopicRow:
    return TopicRow(name, length, published=length, last_id=None, last_publish_ms=None)


def _sub(i: int, lag: int, state: str = "active") -> SubscriptionRow:
    return SubscriptionRow(
        topic="t",
        callback=f"http://cb/{i}",
        id=f"id{i}",
        state=state,
        failures=0,
        last_error=None,
        expires_at=0.0,
        cursor=None,
        lag_events=lag,
        lag_capped=False,
        lag_seconds=float(lag),
    )


def _overview(topics: list[TopicRow], subs: list[SubscriptionRow]) -> Overview:
    return Overview(topics, subs, {"ws": 0, "sse": 0}, True, "x", 0)


def test_top_keeps_the_largest_and_returns_the_rest() -> None:
    shown, rest = top([3, 1, 2, 5], 2, key=lambda v: (v,))
    assert shown == [5, 3] and sorted(rest) == [1, 2]


def test_lag_seconds_is_never_negative_and_zero_when_nothing_pends() -> None:
    assert lag_seconds(None, 10_000) == 0.0
    assert lag_seconds(4_000, 10_000) == 6.0
    assert lag_seconds(12_000, 10_000) == 0.0


def test_subscriptions_by_state_always_names_every_state() -> None:
    counts = {"active": 0, "suspended": 0, "disabled": 0}
    assert _overview([], []).subscriptions_by_state() == counts
    subs = [_sub(0, 0), _sub(1, 0, "suspended"), _sub(2, 0, "suspended"), _sub(3, 0, "disabled")]
    assert _overview([], subs).subscriptions_by_state() == {
        **counts,
        "active": 1,
        "suspended": 2,
        "disabled": 1,
    }


def test_series_label_sets_are_bounded_and_the_rest_folded() -> None:
    topics = [_topic(f"t{i}", i) for i in range(50)]
    subs = [_sub(i, i) for i in range(50)]
    families = {f.name: f for f in overview_families(_overview(topics, subs), n=5)}
    lengths = {s.labels["topic"]: s.value for s in families["rshub_stream_length"].samples}
    assert set(lengths) == {"t49", "t48", "t47", "t46", "t45", OTHERS}
    assert lengths[OTHERS] == sum(range(45))
    lag = families["rshub_subscription_lag_events"].samples
    assert len(lag) == 6
    others = [s for s in lag if s.labels["subscription"] == OTHERS]
    assert others[0].value == sum(range(45))
    seconds = families["rshub_subscription_lag_seconds"].samples
    assert [s.value for s in seconds if s.labels["subscription"] == OTHERS] == [44.0]
    assert families["rshub_topics"].samples[0].value == 50
