"""hub.core.retrying: the hub's background retry loop, pure (waits recorded, not slept)."""

from __future__ import annotations

import logging

import pytest

from hub.core.retrying import STORE_OUTAGE, retrying
from rsclient.backoff import Backoff


class Flaky(Exception):
    def __init__(self, retry_after: float | None = None) -> None:
        super().__init__("flaky")
        self.retry_after = retry_after


class Script:
    """An attempt that fails ``fails`` times (with ``retry_after``), then returns 42."""

    def __init__(self, fails: int, retry_after: float | None = None) -> None:
        self.fails, self.retry_after, self.calls = fails, retry_after, 0
        self.waits: list[float] = []
        self.noted: list[tuple[str, float]] = []

    async def attempt(self) -> int:
        self.calls += 1
        if self.calls <= self.fails:
            raise Flaky(self.retry_after)
        return 42

    async def pause(self, seconds: float) -> None:
        self.waits.append(seconds)

    async def failed(self, error: Exception, delay: float) -> None:
        self.noted.append((str(error), delay))


async def test_it_retries_until_success_with_the_store_outage_back_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = Script(fails=8)
    log = logging.getLogger("test.retrying")
    with caplog.at_level(logging.WARNING, logger="test.retrying"):
        got = await retrying(
            s.attempt,
            STORE_OUTAGE,
            retry_on=Flaky,
            log=log,
            what="XREAD",
            pause=s.pause,
            failed=s.failed,
        )
    assert got == 42 and s.calls == 9
    assert s.waits == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0])
    assert [d for _, d in s.noted] == s.waits  # told before each pause
    assert caplog.text.count("XREAD failed (flaky); retrying in") == 8


async def test_other_errors_pass_through_at_once() -> None:
    calls = 0

    async def broken() -> None:
        nonlocal calls
        calls += 1
        raise KeyError("bug")

    with pytest.raises(KeyError):
        await retrying(broken, STORE_OUTAGE, retry_on=Flaky, log=None)
    assert calls == 1


async def test_patience_raises_the_last_error_when_the_next_wait_would_not_fit() -> None:
    s = Script(fails=100)
    with pytest.raises(Flaky):
        await retrying(
            s.attempt,
            Backoff(10.0, 10.0, jitter=0.0),
            retry_on=Flaky,
            log=None,
            patience=9.0,
            pause=s.pause,
        )
    assert s.calls == 1 and s.waits == []
    s = Script(fails=3)  # waits that fit are waited
    got = await retrying(
        s.attempt, Backoff(1.0, 1.0, jitter=0.0), retry_on=Flaky, log=None, patience=9.0,
        pause=s.pause,
    )  # fmt: skip
    assert got == 42 and s.waits == [1.0, 1.0, 1.0]


async def test_zero_patience_tries_once() -> None:
    s = Script(fails=100)
    with pytest.raises(Flaky):
        await retrying(s.attempt, STORE_OUTAGE, retry_on=Flaky, log=None, patience=0.0)
    assert s.calls == 1 and s.waits == []


async def test_an_error_s_retry_after_lengthens_its_wait_up_to_the_cap() -> None:
    s = Script(fails=2, retry_after=3.0)
    await retrying(s.attempt, STORE_OUTAGE, retry_on=Flaky, log=None, pause=s.pause)
    assert s.waits == [3.0, 3.0]
    s = Script(fails=1, retry_after=1e6)
    await retrying(s.attempt, STORE_OUTAGE, retry_on=Flaky, log=None, pause=s.pause)
    assert s.waits == [5.0]


async def test_failures_continue_an_earlier_back_off() -> None:
    s = Script(fails=1)
    await retrying(
        s.attempt, Backoff(1.0, 300.0, jitter=0.0), retry_on=Flaky, log=None, failures=3,
        pause=s.pause,
    )  # fmt: skip
    assert s.waits == [8.0]
