"""rsclient.backoff: the one back-off policy and the client side's retrying loop. Pure: no
sockets; the loop's waits are recorded instead of slept."""

from __future__ import annotations

import math
import random
import string
import subprocess
import sys
from email.utils import formatdate

import pytest

from rsclient.backoff import (
    MAX_RETRY_AFTER,
    Backoff,
    Retrier,
    parse_retry_after,
    parse_retry_hint,
    retry_hint,
)

NOW = 1_785_000_000.0  # a fixed "now" for the HTTP-date cases


def test_importing_backoff_pulls_in_neither_aiohttp_nor_redis() -> None:
    code = (
        "import rsclient.backoff, sys; "
        "assert 'aiohttp' not in sys.modules, 'aiohttp'; "
        "assert 'redis' not in sys.modules, 'redis'"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_package_root_imports_nothing() -> None:
    """No façade: the root names nothing, so every import names its module."""
    code = (
        "import rsclient, sys; "
        "assert not [m for m in sys.modules if m.startswith('rsclient.')], sys.modules; "
        "assert not hasattr(rsclient, 'Backoff')"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_without_jitter_it_doubles_from_base_up_to_the_cap() -> None:
    policy = Backoff(0.1, 5.0, jitter=0.0)
    assert [policy.delay(n) for n in range(1, 9)] == pytest.approx(
        [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    )
    assert policy.delay(10**9) == 5.0  # a huge attempt number neither overflows nor grows
    assert policy.delay(0) == policy.delay(-3) == 0.1  # "before the first" is the first


def test_equal_jitter_stays_in_the_upper_half_and_spreads() -> None:
    policy = Backoff(1.0, 300.0)  # the hub's delivery default: equal jitter
    rng = random.Random(7)
    for attempt, full in [(1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (30, 300.0)]:
        delays = [policy.delay(attempt, rng=rng) for _ in range(300)]
        assert all(full / 2 <= d <= full for d in delays)
        assert max(delays) - min(delays) > full / 4  # it is jittered


@pytest.mark.parametrize("jitter", [0.0, 0.25, 0.5, 1.0])
def test_jitter_bounds(jitter: float) -> None:
    policy = Backoff(0.2, 30.0, factor=3.0, jitter=jitter)
    rng = random.Random(1)
    for attempt in range(1, 12):
        ceiling = policy.ceiling(attempt)
        for _ in range(50):
            assert (1 - jitter) * ceiling <= policy.delay(attempt, rng=rng) <= ceiling <= 30.0


def test_a_seeded_rng_gives_the_same_delays() -> None:
    policy = Backoff(0.5, 60.0)
    first = [policy.delay(n, rng=random.Random(42)) for n in range(1, 20)]
    again = [policy.delay(n, rng=random.Random(42)) for n in range(1, 20)]
    other = [policy.delay(n, rng=random.Random(43)) for n in range(1, 20)]
    assert first == again != other


def test_retry_after_lengthens_a_delay_up_to_the_cap_only() -> None:
    policy = Backoff(0.1, 10.0, jitter=0.0)
    assert policy.delay(1, retry_after=3.0) == 3.0
    assert policy.delay(1, retry_after=1e9) == 10.0  # capped
    assert policy.delay(5, retry_after=0.5) == 1.6  # never shortens the back-off
    assert policy.delay(1, retry_after=math.inf) == 10.0
    assert policy.delay(1, retry_after=math.nan) == 0.1
    assert policy.delay(1, retry_after=-5.0) == 0.1


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base": 0, "cap": 1},
        {"base": 1, "cap": 0},
        {"base": -1, "cap": 1},
        {"base": 1, "cap": 1, "factor": 0.5},
        {"base": 1, "cap": 1, "jitter": 1.5},
        {"base": 1, "cap": 1, "jitter": -0.1},
        {"base": math.nan, "cap": 1},
        {"base": 1, "cap": math.inf},
    ],
)
def test_nonsense_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="back-off"):
        Backoff(**kwargs)


def test_a_policy_is_an_immutable_value() -> None:
    policy = Backoff(1.0, 2.0)
    with pytest.raises(AttributeError):
        policy.base = 3.0  # type: ignore[misc]
    assert policy == Backoff(1.0, 2.0) and hash(policy) == hash(Backoff(1.0, 2.0))


# -- Retry-After -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        (" 5 ", 5.0),
        ("0", 0.0),
        (None, None),
        ("", None),
        ("soon", None),
        ("1.5", None),
        ("-1", None),
        ("+3", None),
        ("²", None),  # float("²") raises; isdigit() says yes
        ("٣", None),  # an Arabic-Indic three
        ("9" * 5000, MAX_RETRY_AFTER),  # int() of it would raise
    ],
)
def test_delta_seconds(value: str | None, seconds: float | None) -> None:
    assert parse_retry_after(value, NOW) == seconds


@pytest.mark.parametrize(
    "form",
    [
        "{imf}",  # IMF-fixdate, the form to send
        "{rfc850}",  # obsolete RFC 850 form, to be accepted (RFC 9110 §5.6.7)
        "{asctime}",  # obsolete asctime form, likewise
    ],
)
def test_http_date_in_every_form(form: str) -> None:
    import datetime as dt

    at = dt.datetime.fromtimestamp(NOW + 90, dt.UTC)
    text = form.format(
        imf=formatdate(NOW + 90, usegmt=True),
        rfc850=at.strftime("%A, %d-%b-%y %H:%M:%S GMT"),
        asctime=at.strftime("%a %b %e %H:%M:%S %Y"),
    )
    assert parse_retry_after(text, NOW) == pytest.approx(90.0)


def test_http_date_in_the_past_is_now_and_far_ahead_is_capped() -> None:
    assert parse_retry_after(formatdate(NOW - 3600, usegmt=True), NOW) == 0.0
    assert parse_retry_after(formatdate(NOW + 10**8, usegmt=True), NOW) == MAX_RETRY_AFTER
    assert parse_retry_after(formatdate(NOW + 3600, usegmt=True), NOW, cap=300.0) == 300.0
    assert parse_retry_after("7200", NOW, cap=300.0) == 300.0


def test_http_date_without_now_counts_from_the_clock() -> None:
    import time

    seconds = parse_retry_after(formatdate(time.time() + 30, usegmt=True))
    assert seconds is not None and 28.0 <= seconds <= 30.0


@pytest.mark.parametrize(
    "value",
    [
        "Sun, 06 Nov 99999 08:49:37 GMT",  # year out of range
        "Sun, 06 Nov 1994 25:49:37 GMT",  # hour out of range
        "Sun, 32 Nov 1994 08:49:37 GMT",
        "Sun, 06 Xyz 1994 08:49:37 GMT",
        "Sun,",
        "GMT",
        "1 2 3 4 5",
        "Sun Nov  6 08:49:37 100000000",
        "\x00\x01",
        "nan",
        "inf",
        "1e9",
        "0x10",
    ],
)
def test_junk_is_not_understood(value: str) -> None:
    assert parse_retry_after(value, NOW) is None


def _junk(rng: random.Random) -> str:
    kind = rng.randrange(6)
    if kind == 0:
        return formatdate(NOW + rng.uniform(-5e10, 5e10), usegmt=rng.random() < 0.5)
    if kind == 1:
        return str(rng.randrange(10 ** rng.randrange(1, 80))) * rng.randrange(1, 3)
    if kind == 2:  # a real date, bytes mangled
        text = list(formatdate(NOW + rng.uniform(-1e6, 1e6), usegmt=True))
        for _ in range(rng.randrange(1, 4)):
            text[rng.randrange(len(text))] = rng.choice(string.printable)
        return "".join(text)
    if kind == 3:
        return " ".join(str(rng.randrange(-(10**6), 10**6)) for _ in range(rng.randrange(1, 7)))
    alphabet = string.printable + "éü²٣\u2028\ufeff\x00"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 120)))


def test_seeded_fuzz_never_raises_never_negative_never_above_the_cap() -> None:
    rng = random.Random(20261124)
    policy = Backoff(0.05, 12.0)
    understood = 0
    for _ in range(20_000):
        value = _junk(rng)
        cap = rng.choice([1.0, 300.0, MAX_RETRY_AFTER])
        seconds = parse_retry_after(value, NOW, cap=cap)
        if seconds is not None:
            understood += 1
            assert 0.0 <= seconds <= cap and math.isfinite(seconds), (value, seconds)
        delay = policy.delay(rng.randrange(1, 100), retry_after=seconds, rng=rng)
        assert 0.0 <= delay <= policy.cap, (value, delay)
    assert understood > 1000  # the fuzz does reach the date and number paths


# -- the retrying loop -------------------------------------------------------------------------


class Waits:
    """A pause that records what the loop waited instead of sleeping, and a clock that
    the waits move on."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.now = 1000.0

    async def __call__(self, seconds: float) -> None:
        self.seconds.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


async def test_the_loop_waits_the_policy_between_failed_attempts() -> None:
    waits = Waits()
    retry = Retrier(Backoff(0.1, 1.0, jitter=0.0), pause=waits)
    async for attempt in retry:
        if attempt < 6:
            assert retry.failed() == waits_expected(attempt)
            continue
        break
    assert retry.attempt == 6
    assert waits.seconds == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0])


def waits_expected(attempt: int) -> float:
    return min(1.0, 0.1 * 2.0 ** (attempt - 1))


async def test_a_limit_of_attempts_ends_the_loop_without_a_last_useless_wait() -> None:
    waits = Waits()
    retry = Retrier(Backoff(0.2, 5.0, jitter=0.0), attempts=3, pause=waits)
    tried = []
    async for attempt in retry:
        tried.append(attempt)
        retry.failed()
    assert tried == [1, 2, 3]
    assert waits.seconds == pytest.approx([0.2, 0.4])  # the mirror used to wait 0.8 s more


async def test_give_up_after_counts_the_next_delay() -> None:
    waits = Waits()
    retry = Retrier(
        Backoff(4.0, 4.0, jitter=0.0), give_up_after=15.0, pause=waits, clock=waits.clock
    )
    delays = []
    async for _ in retry:
        waits.now += 1.0  # each attempt takes a second
        delays.append(retry.failed())
    # 1+4, 6+4, 11+4 fit in 15 s; at 16 s the budget is spent
    assert delays == [4.0, 4.0, 4.0, None] and retry.attempt == 4
    retry = Retrier(Backoff(4.0, 4.0, jitter=0.0), give_up_after=15.0, clock=waits.clock)
    waits.now += 14.0
    retry.succeeded()  # a success starts the budget over
    waits.now += 10.0
    assert retry.failed() == 4.0


async def test_retry_after_is_honoured_by_the_loop() -> None:
    waits = Waits()
    retry = Retrier(Backoff(0.1, 30.0, jitter=0.0), pause=waits)
    async for attempt in retry:
        if attempt == 1:
            retry.failed(retry_after=parse_retry_after("7", NOW))
            continue
        break
    assert waits.seconds == [7.0]


async def test_success_starts_over_and_a_resumable_end_retries_at_once() -> None:
    waits = Waits()
    retry = Retrier(Backoff(0.1, 30.0, jitter=0.0), pause=waits)
    script = ["fail", "fail", "data", "fail", "resume", "fail", "stop"]
    async for attempt in retry:
        step = script[attempt - 1]
        if step == "fail":
            retry.failed()
        elif step == "data":
            retry.succeeded()
            retry.failed()  # connected, got data, then lost
        elif step == "stop":
            break
        # "resume": go round without a failure
    assert waits.seconds == pytest.approx([0.1, 0.2, 0.1, 0.2, 0.4])


async def test_failures_continue_an_earlier_count() -> None:
    retry = Retrier(Backoff(1.0, 300.0, jitter=0.0), failures=4, pause=Waits())
    async for _ in retry:
        assert retry.failed() == 16.0
        break


async def test_a_seeded_loop_is_reproducible() -> None:
    async def run(seed: int) -> list[float]:
        waits = Waits()
        retry = Retrier(Backoff(0.5, 8.0), attempts=8, rng=random.Random(seed), pause=waits)
        async for _ in retry:
            retry.failed()
        return waits.seconds

    assert await run(5) == await run(5) != await run(6)


@pytest.mark.parametrize(
    ("message", "seconds"),
    [
        ("too slow; resume with since=5-0; retry after 4.25 s", 4.25),
        ("retry after 3 s", 3.0),
        ("retry after 0.00 s; resume with since=5-0", 0.0),
        ("too slow; resume with since=5-0", None),
        ("", None),
        (None, None),
        ("retry after -1 s", None),
        ("retry after 1e9 s", None),
        ("retry after 4.25s", None),
        ("no retry after 4 s here", None),
        ("retry after 9999999 s", None),
        ("retry after 999999 s", 60.0),  # the cap below
    ],
)
def test_a_retry_hint_is_read_back_or_nothing(message: str | None, seconds: float | None) -> None:
    assert parse_retry_hint(message, cap=60.0 if seconds == 60.0 else MAX_RETRY_AFTER) == seconds


def test_a_retry_hint_round_trips_and_fuzz_never_raises() -> None:
    for wait in (0.0, 0.004, 1.5, 9.999, 3600.0):
        assert parse_retry_hint(f"too slow; {retry_hint(wait)}") == round(wait, 2)
    assert retry_hint(-3) == "retry after 0.00 s"
    rng = random.Random(11)
    alphabet = "retry after 0123456789.;s -é\x00"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        got = parse_retry_hint(text)
        assert got is None or 0 <= got <= MAX_RETRY_AFTER
