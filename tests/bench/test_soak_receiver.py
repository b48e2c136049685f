"""The soak's bookkeeping on hand-made deliveries: what a subscriber missed, latency buckets,
and the ``--repeat`` summary of ``bench/hub.py``."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.hub import Row, print_repeats
from bench.soak import Receiver, bucket, bucket_ms, hist_percentile

MS = 1_000_000


def test_receiver_counts_received_missed_and_duplicates() -> None:
    receiver = Receiver(sinks=2)
    receiver.take(0, [("0", "0"), ("1", "0"), ("3", "0")], 5 * MS, probe=False)
    receiver.take(0, [(b"1", b"0")], 5 * MS, probe=False)  # bytes from a WebSub body
    receiver.take(1, [], 0, probe=True)
    assert [got[:4].count(1) for got in receiver.got] == [3, 0]
    assert receiver.duplicates == [1, 0]
    assert receiver.probed == [False, True]
    assert sum(receiver.hist.values()) == 4


def test_buckets_are_within_one_percent_and_percentiles_pick_them() -> None:
    for ms in (0.05, 1.0, 9.7, 250.0):
        assert bucket_ms(bucket(int(ms * MS))) == pytest.approx(ms, rel=0.011)
    hist = Counter({bucket(1 * MS): 98, bucket(10 * MS): 1, bucket(100 * MS): 1})
    assert hist_percentile(hist, 0.5) == pytest.approx(1.0, rel=0.011)
    assert hist_percentile(hist, 0.99) == pytest.approx(10.0, rel=0.011)
    assert hist_percentile(hist, 1.0) == pytest.approx(100.0, rel=0.011)


def test_repeat_summary_needs_three_of_five() -> None:
    def run(p99: float) -> list[Row]:
        return [Row("p99", p99, "ms", target=("max", 10)), Row("p50", 1.0, "ms")]

    assert print_repeats([run(v) for v in (9, 9, 9, 11, 12)])
    assert not print_repeats([run(v) for v in (9, 9, 11, 11, 12)])
