"""The failure policy of WebSub deliveries, as pure data: what each answer counts, when a
batch is dead-lettered, when a subscription is suspended or disabled."""

from __future__ import annotations

import random

import pytest

from hub.core.failure_policy import CLIENT_ERROR_STRIKES, FailurePolicy, Track, Verdict
from rsclient.backoff import Backoff

POLICY = FailurePolicy(
    Backoff(base=1.0, cap=60.0, jitter=0.0), window=100.0, disable_after=1000.0, suspend_after=10
)
T0 = 1_000_000.0


def run(
    statuses: list[int | None], start: float = T0, step: float = 1.0
) -> list[tuple[Verdict, Track]]:
    """Feed ``statuses`` one ``step`` apart from ``start``; each verdict and track."""
    track, out = Track(), []
    for i, status in enumerate(statuses):
        decision = POLICY.decide(track, status, start + i * step)
        track = decision.track
        out.append((decision.verdict, track))
    return out


@pytest.mark.parametrize(
    ("status", "strikes"),
    [
        (None, 1),
        (500, 1),
        (502, 1),
        (504, 1),
        (408, 1),
        (302, 1),
        (400, CLIENT_ERROR_STRIKES),
        (401, CLIENT_ERROR_STRIKES),
        (404, CLIENT_ERROR_STRIKES),
        (413, CLIENT_ERROR_STRIKES),
        (429, 0),
        (503, 0),
    ],
)
def test_what_each_answer_counts_toward_suspension(status: int | None, strikes: int) -> None:
    assert FailurePolicy.strikes(status) == strikes


def test_410_ends_the_subscription_whatever_the_record() -> None:
    decision = POLICY.decide(Track(failures=3, strikes=3), 410, T0)
    assert decision.verdict is Verdict.GONE


def test_retries_back_off_and_honour_retry_after_within_the_cap() -> None:
    track = Track()
    delays = []
    for i in range(4):
        decision = POLICY.decide(track, 500, T0 + i)
        track = decision.track
        delays.append(decision.delay)
    assert delays == [1.0, 2.0, 4.0, 8.0] and track.failures == 4
    assert POLICY.decide(Track(), 503, T0, retry_after=30.0).delay == 30.0
    assert POLICY.decide(Track(), 429, T0, retry_after=3600.0).delay == 60.0


def test_jitter_stays_within_half_of_each_delay() -> None:
    policy = FailurePolicy(Backoff(1.0, 60.0), window=100.0, disable_after=1000.0, suspend_after=10)
    rng = random.Random(7)
    delays = [policy.decide(Track(failures=2), 500, T0, rng=rng).delay for _ in range(200)]
    assert all(2.0 <= d <= 4.0 for d in delays) and len(set(delays)) > 100


def test_client_errors_suspend_faster_than_server_errors() -> None:
    assert [t.strikes for _, t in run([404, 404])] == [5, 10]
    assert POLICY.suspended(run([404, 404])[-1][1])
    assert not POLICY.suspended(run([500] * 9)[-1][1])
    assert POLICY.suspended(run([500] * 10)[-1][1])


def test_a_suspended_subscription_is_probed_at_the_longest_back_off() -> None:
    decision = POLICY.decide(Track(failures=1, strikes=5), 404, T0)
    assert decision.suspended and decision.delay == 60.0  # not 2 s: the cap


def test_429_and_503_never_suspend_nor_disable() -> None:
    # Far beyond every bound: thousands of attempts over ten windows and disable periods.
    results = run([429, 503] * 2000, step=5.0)
    assert all(t.strikes == 0 and t.failing_since == 0.0 for _, t in results)
    assert {v for v, _ in results} <= {Verdict.RETRY, Verdict.DEAD_LETTER}


def test_429_and_503_restart_the_disable_clock() -> None:
    track = POLICY.decide(Track(), 500, T0).track
    assert track.failing_since == T0
    track = POLICY.decide(track, 503, T0 + 900).track
    assert track.failing_since == 0.0
    later = POLICY.decide(track, 500, T0 + 1100)  # 1100 s after the first 500: not disabled
    assert later.verdict is not Verdict.DISABLE and later.track.failing_since == T0 + 1100


def test_a_batch_is_dead_lettered_once_its_window_is_spent() -> None:
    verdicts = [v for v, _ in run([500] * 12, step=10.0)]
    # Failures at 0, 10, ..., 100: the one at 100 s after the first is the end of the window.
    assert verdicts[:10] == [Verdict.RETRY] * 10 and verdicts[10] is Verdict.DEAD_LETTER
    assert verdicts[11] is Verdict.RETRY  # the next batch starts its own window


def test_the_window_counts_from_the_batch_s_first_failure_whatever_the_answers() -> None:
    results = run([503, 429, 500, 404, None], step=30.0)
    assert [v for v, _ in results][:4] == [Verdict.RETRY] * 4
    assert results[4][0] is Verdict.DEAD_LETTER  # 120 s after its first failure (a 503)
    assert results[3][1].batch_failing_since == T0


def test_a_dead_letter_keeps_the_subscription_s_record() -> None:
    before = Track(failures=7, strikes=7, failing_since=T0 - 500, batch_failing_since=T0 - 100)
    decision = POLICY.decide(before, 500, T0)
    assert decision.verdict is Verdict.DEAD_LETTER and decision.delay == 0.0
    after = decision.track
    assert after.batch_failing_since == 0.0  # the next batch's window starts at its failure
    assert (after.failures, after.strikes, after.failing_since) == (8, 8, T0 - 500)


def test_sustained_failure_disables_before_dead_lettering() -> None:
    before = Track(failures=50, strikes=50, failing_since=T0 - 1000, batch_failing_since=T0 - 100)
    decision = POLICY.decide(before, 500, T0)
    assert decision.verdict is Verdict.DISABLE  # the batch stays for a resume
    assert POLICY.decide(before, 503, T0).verdict is Verdict.DEAD_LETTER


def test_disabling_counts_from_the_first_failure_since_the_last_success() -> None:
    # A callback that fails every 60 s, each batch dead-lettered in turn, for 1000 s.
    results = run([500] * 20, step=60.0)
    verdicts = [v for v, _ in results]
    first_disable = verdicts.index(Verdict.DISABLE)
    assert first_disable * 60.0 >= 1000.0 and (first_disable - 1) * 60.0 < 1000.0
    assert Verdict.DEAD_LETTER in verdicts[:first_disable]
