"""The sync-model metrics on hand-made timelines whose answers are worked out by hand."""

from __future__ import annotations

import math

import pytest

from bench.syncmetrics import (
    Change,
    average_consistency,
    consistency_samples,
    latencies,
    percentile,
    transfer_efficiency,
)

START = {"a": "a0", "b": "b0"}
# Source: a updated at 1, b deleted at 2, c created at 3.
SOURCE = [Change(1.0, "a", "a1"), Change(2.0, "b", None), Change(3.0, "c", "c0")]
# Destination: a copied at 1.5, b removed at 4, c never copied.
DEST = [Change(1.5, "a", "a1"), Change(4.0, "b", None)]


def test_consistency_counts_stale_missing_and_deleted_copies() -> None:
    samples = consistency_samples(START, SOURCE, START, DEST, start=0.0, end=5.0, step=1.0)
    # t=0 all in sync; t=1 a stale; t=2 b deleted but still copied; t=3 c missing too
    # (a of a,b,c in sync); t=4 b gone from both (a of a,c); t=5 unchanged.
    assert samples == pytest.approx([1.0, 0.5, 0.5, 1 / 3, 0.5, 0.5])
    average = average_consistency(START, SOURCE, START, DEST, start=0.0, end=5.0, step=1.0)
    assert average == pytest.approx((1 + 0.5 + 0.5 + 1 / 3 + 0.5 + 0.5) / 6)


def test_latency_per_change_and_unsynced() -> None:
    result = latencies(START, SOURCE, START, DEST)
    assert sorted(result.values) == pytest.approx([0.5, 2.0])
    assert result.unsynced == 1  # c
    # c, made at 3, is censored at the timelines' last change (b removed at 4)
    assert result.censored == pytest.approx([1.0])
    assert result.mean() == pytest.approx((0.5 + 2.0 + 1.0) / 3)
    # Only the changes made in the interval are measured.
    assert latencies(START, SOURCE, START, DEST, since=1.5).values == pytest.approx([2.0])


def test_unsynced_changes_count_as_censored_at_the_end_of_observation() -> None:
    # Observed until 10: c (made at 3) never arrived, so its latency is at least 7 s and
    # it weighs in the figures with that bound instead of vanishing from them.
    result = latencies(START, SOURCE, START, DEST, observed_until=10.0)
    assert result.values == pytest.approx([0.5, 2.0])
    assert result.censored == pytest.approx([7.0])
    assert result.unsynced == 1
    assert result.mean() == pytest.approx((0.5 + 2.0 + 7.0) / 3)
    assert percentile(result.all(), 1.0) == pytest.approx(7.0)
    # A copy made after the end of observation is not seen: b is censored at 3.5 too.
    cut = latencies(START, SOURCE, START, DEST, observed_until=3.5)
    assert cut.values == pytest.approx([0.5])
    assert sorted(cut.censored) == pytest.approx([0.5, 1.5])  # c at 3, b at 2


def test_superseded_change_is_in_sync_when_the_later_state_arrives() -> None:
    source = [Change(1.0, "a", "a1"), Change(2.0, "a", "a2")]
    dest = [Change(2.5, "a", "a2")]
    result = latencies(START, source, START, dest)
    assert sorted(result.values) == pytest.approx([0.5, 1.5])
    assert result.unsynced == 0


def test_efficiency_and_percentiles() -> None:
    assert transfer_efficiency(300, 1200) == 0.25
    assert math.isnan(transfer_efficiency(0, 0))
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert percentile([1.0, 2.0, 3.0], 0.99) == pytest.approx(2.98)
