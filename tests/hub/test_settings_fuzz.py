"""Hostile settings: every ``RSHUB_*`` value is taken or refused naming its variable, and a
hub serves with any value the settings take.

The named cases are values that passed validation and then broke the hub: a
``GC_YOUNG_THRESHOLD`` too large for a C int (a traceback at start), a negative per-topic
retention (every publish to that topic 503), ``WORKERS=10**30`` (start-up spawning without
end), ``inf`` for durations, a ``BASE_URL`` that no link can be built from, an empty token
(``ADMIN_TOKEN=`` read as none), a topic name no URL can name in a ``TOPIC_*`` map, a
``CALLBACK_CA_FILE`` name too long for the file system (an ``OSError`` out of validation).

The seeded fuzz has two halves:

* 3,000 mangled values over every field, from the environment as an operator sets them:
  each is taken, or refused with pydantic's errors, described in one line that names the
  field's variable and never echoes a token;
* hubs in this process under the watchdog, each with every bounded number at its minimum,
  its maximum or its default (drawn), and the per-topic maps set for the topic used: each
  takes a WebSub subscription, a publish, the change over SSE and to the callback, and
  serves its Change List, Resource List and ``/metrics``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import string
from typing import Any

import aiohttp
import pytest
from pydantic import ValidationError
from pydantic_settings import SettingsError

from hub.core.settings import Settings, describe_error
from resourcesync import parse
from tests.conftest import start_hub
from tests.hub.callback_server import CallbackServer
from tests.support import TIME_SCALE, changes, free_port, notification, wait_for
from tests.watchdog import Watchdog

#: Secret-looking values the descriptions must never repeat.
_SECRET = "Zq9-secret-token"


def settings_from(env: dict[str, str]) -> Settings:
    """``Settings()`` as ``rshub serve`` builds it: from ``RSHUB_*`` variables only."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return Settings()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def refusal(env: dict[str, str]) -> str:
    """The one-line description of why ``env`` is refused (fails if it is taken)."""
    with pytest.raises((ValidationError, SettingsError)) as caught:
        settings_from(env)
    text = describe_error(caught.value)
    assert "\n" not in text and text
    return text


@pytest.mark.parametrize(
    "env,named",
    [
        ({"RSHUB_GC_YOUNG_THRESHOLD": str(10**30)}, "RSHUB_GC_YOUNG_THRESHOLD"),
        ({"RSHUB_WORKERS": str(10**30)}, "RSHUB_WORKERS"),
        ({"RSHUB_WORKERS": "0"}, "RSHUB_WORKERS"),
        ({"RSHUB_PARSE_WORKERS": "100000"}, "RSHUB_PARSE_WORKERS"),
        ({"RSHUB_MAX_CONNECTIONS": str(10**30)}, "RSHUB_MAX_CONNECTIONS"),
        ({"RSHUB_RETENTION_SECONDS": str(10**30)}, "RSHUB_RETENTION_SECONDS"),
        ({"RSHUB_RETENTION_MAX_EVENTS": str(10**30)}, "RSHUB_RETENTION_MAX_EVENTS"),
        ({"RSHUB_IDEMPOTENCY_SECONDS": str(10**30)}, "RSHUB_IDEMPOTENCY_SECONDS"),
        ({"RSHUB_LEASE_SECONDS_MAX": str(10**30)}, "RSHUB_LEASE_SECONDS_MAX"),
        ({"RSHUB_RETENTION_SWEEP_SECONDS": "inf"}, "RSHUB_RETENTION_SWEEP_SECONDS"),
        ({"RSHUB_RETRY_WINDOW_SECONDS": "inf"}, "RSHUB_RETRY_WINDOW_SECONDS"),
        ({"RSHUB_DISABLE_AFTER_SECONDS": "1e308"}, "RSHUB_DISABLE_AFTER_SECONDS"),
        ({"RSHUB_PING_RATE_PER_SECOND": "inf"}, "RSHUB_PING_RATE_PER_SECOND"),
        ({"RSHUB_HEARTBEAT_SECONDS": "1e-9"}, "RSHUB_HEARTBEAT_SECONDS"),
        ({"RSHUB_RETENTION_SWEEP_SECONDS": "0.001"}, "RSHUB_RETENTION_SWEEP_SECONDS"),
        ({"RSHUB_CHANGELIST_SCAN_SECONDS": "0.0001"}, "RSHUB_CHANGELIST_SCAN_SECONDS"),
        ({"RSHUB_OWNERSHIP_RECONCILE_SECONDS": "1e-6"}, "RSHUB_OWNERSHIP_RECONCILE_SECONDS"),
        ({"RSHUB_RETRY_BASE_SECONDS": "1e-9"}, "RSHUB_RETRY_BASE_SECONDS"),
        ({"RSHUB_TOPIC_RETENTION_SECONDS": '{"news": -5}'}, "RSHUB_TOPIC_RETENTION_SECONDS"),
        ({"RSHUB_TOPIC_RETENTION_MAX_EVENTS": '{"news": -1}'}, "RSHUB_TOPIC_RETENTION_MAX_EVENTS"),
        ({"RSHUB_TOPIC_RETENTION_SECONDS": '{"../x": 60}'}, "RSHUB_TOPIC_RETENTION_SECONDS"),
        ({"RSHUB_TOPIC_TOKENS": '{"a b": ["t"]}'}, "RSHUB_TOPIC_TOKENS"),
        ({"RSHUB_TOPIC_READ_TOKENS": '{"": ["t"]}'}, "RSHUB_TOPIC_READ_TOKENS"),
        ({"RSHUB_BASE_URL": "inf"}, "RSHUB_BASE_URL"),
        ({"RSHUB_BASE_URL": "ftp://hub.invalid"}, "RSHUB_BASE_URL"),
        ({"RSHUB_BASE_URL": "http://hub.invalid/?q=1"}, "RSHUB_BASE_URL"),
        ({"RSHUB_BASE_URL": "http://user@hub.invalid"}, "RSHUB_BASE_URL"),
        ({"RSHUB_BASE_URL": "http://hub.invalid:99999"}, "RSHUB_BASE_URL"),
        ({"RSHUB_ALIAS_URLS": "http://hub.invalid,[::1"}, "RSHUB_ALIAS_URLS"),
        ({"RSHUB_ADMIN_TOKEN": ""}, "RSHUB_ADMIN_TOKEN"),
        ({"RSHUB_METRICS_TOKEN": " "}, "RSHUB_METRICS_TOKEN"),
        ({"RSHUB_TOKENS": '[""]'}, "RSHUB_TOKENS"),
        ({"RSHUB_READ_TOKENS": '["tab\\there"]'}, "RSHUB_READ_TOKENS"),
        ({"RSHUB_TOKENS": '["caf\\u00e9"]'}, "RSHUB_TOKENS"),
        ({"RSHUB_CALLBACK_CA_FILE": "9" * 5000}, "RSHUB_CALLBACK_CA_FILE"),
        ({"RSHUB_CALLBACK_CLIENT_KEY": "/nonexistent/key.pem"}, "RSHUB_CALLBACK_CLIENT_KEY"),
        (
            {"RSHUB_LEASE_SECONDS_MIN": "100000", "RSHUB_LEASE_SECONDS_MAX": "1000"},
            "RSHUB_LEASE_SECONDS_MIN",
        ),
        ({"RSHUB_RETRY_BASE_SECONDS": "600"}, "RSHUB_RETRY_MAX_SECONDS"),
    ],
)
def test_a_value_that_broke_the_hub_is_refused_naming_it(env: dict[str, str], named: str) -> None:
    assert named in refusal(env)


def test_a_refused_token_is_never_repeated() -> None:
    for env in (
        {"RSHUB_TOKENS": json.dumps([_SECRET + " x"])},
        {"RSHUB_TOPIC_TOKENS": json.dumps({"news": [_SECRET + "\t"]})},
        {"RSHUB_ADMIN_TOKEN": _SECRET + "é"},
        {"RSHUB_METRICS_TOKEN": " " + _SECRET},
    ):
        text = refusal(env)
        assert _SECRET not in text and "RSHUB_" in text


def test_the_bounds_still_take_what_operators_use() -> None:
    """The new bounds and floors refuse nothing a deployment or this suite sets."""
    taken = settings_from(
        {
            "RSHUB_WORKERS": "auto",
            "RSHUB_TOKENS": '["s3cret", "A-Za-z0-9._~+/="]',
            "RSHUB_TOPIC_TOKENS": '{"news.v2": ["t1"]}',
            "RSHUB_BASE_URL": "https://hub.invalid/rs/",
            "RSHUB_ALIAS_URLS": "http://hub:8080,http://[::1]:8080",
            "RSHUB_RETENTION_SECONDS": "0",
            "RSHUB_TOPIC_RETENTION_SECONDS": '{"news.v2": 3600}',
            "RSHUB_HEARTBEAT_SECONDS": "0.2",
            "RSHUB_CHANGELIST_SCAN_SECONDS": "0",
            "RSHUB_RETRY_BASE_SECONDS": "0.01",
            "RSHUB_RETRY_MAX_SECONDS": "0.01",
            "RSHUB_LEASE_SECONDS_MIN": "60",
            "RSHUB_LEASE_SECONDS_MAX": "60",
        }
    )
    assert taken.workers == "auto" and taken.topic_retention_seconds == {"news.v2": 3600}
    assert taken.public_url == "https://hub.invalid/rs"


# -- the seeded fuzz: values from the environment --------------------------------------


def _mangled(rng: random.Random) -> str:
    pool = [
        "inf",
        "-inf",
        "nan",
        "1e308",
        "-0",
        str(rng.randint(-(10**40), 10**40)),
        str(rng.uniform(-1e6, 1e6)),
        str(2**31),
        str(2**63),
        "true",
        "auto",
        "",
        " ",
        "[",
        "{",
        "[]",
        "{}",
        '["a"]',
        '{"t": 1}',
        '{"t": ["x"]}',
        '{"t": -1}',
        '{"../t": [""]}',
        "http://hub.invalid",
        "ftp://hub.invalid",
        "http://[::1",
        "²",
        "٣",
        "1_000",
        "0x10",
        "1e3",
        "\u2028",
        "é" * rng.randint(1, 300),
        "9" * rng.randint(100, 5000),
    ]
    value = rng.choice(pool)
    if value and rng.random() < 0.3:  # and a byte or two changed
        chars = list(value)
        for _ in range(rng.randint(1, 3)):
            chars[rng.randrange(len(chars))] = rng.choice(string.printable + "é\u00a0")
        value = "".join(chars)
    return value.replace("\0", "")


def test_mangled_values_are_taken_or_refused_naming_the_variable() -> None:
    rng = random.Random(2211)
    fields = sorted(Settings.model_fields)
    refused = taken = 0
    for _ in range(3000):
        name = rng.choice(fields)
        variable = f"RSHUB_{name.upper()}"
        value = _mangled(rng)
        try:
            settings_from({variable: value})
        except (ValidationError, SettingsError) as exc:
            text = describe_error(exc)
            assert variable in text and "\n" not in text, (variable, value, text)
            refused += 1
        else:
            taken += 1
    assert refused > 2000 and taken > 100  # the fuzz reaches both outcomes


# -- the seeded fuzz: hubs at the edges of every range ----------------------------------

#: Minimums a hub cannot serve a test with by definition (it would time every request out,
#: or refuse the test's own connections): drawn from the default and the maximum only.
_NOT_AT_MINIMUM = {
    "header_timeout_seconds",
    "body_timeout_seconds",
    "keepalive_timeout_seconds",
    "verify_timeout",
    "delivery_timeout",
    "max_connections",
    "max_body_bytes",
    "stream_close_seconds",
    "shutdown_streams_seconds",
}
#: Left at their defaults: process-wide (the cyclic GC of this test process), processes
#: (a pool of 256), start-up only, or the hub's own address and Redis.
_FIXED = {
    "gc_young_threshold",
    "parse_workers",
    "workers",
    "port",
    "redis_startup_seconds",
    "redis_wait_replicas",
    "redis_wait_seconds",
}


def _bounds(name: str) -> tuple[float, float] | None:
    field = Settings.model_fields[name]
    if field.annotation not in (int, float):
        return None
    low = high = None
    for rule in field.metadata:
        for attribute in ("ge", "gt"):
            if getattr(rule, attribute, None) is not None:
                low = getattr(rule, attribute) + (1e-3 if attribute == "gt" else 0)
        if getattr(rule, "le", None) is not None:
            high = rule.le
    assert high is not None, f"{name} has no upper bound"  # every number is bounded
    return (low if low is not None else 0), high


def _edges(rng: random.Random, topic: str) -> dict[str, Any]:
    draw: dict[str, Any] = {}
    for name, field in Settings.model_fields.items():
        bounds = _bounds(name)
        if bounds is None or name in _FIXED:
            continue
        low, high = bounds
        choices = [field.get_default(call_default_factory=True), high]
        if name not in _NOT_AT_MINIMUM:
            choices.append(low)
        value = rng.choice(choices)
        draw[name] = int(value) if field.annotation is int else float(value)
    draw["topic_retention_seconds"] = {topic: rng.choice([0, 3600, 100 * 365 * 86_400])}
    draw["topic_retention_max_events"] = {topic: rng.choice([0, 1, 10**12])}
    draw["parse_pool"] = "thread"
    draw["lean_sse"] = rng.random() < 0.5
    draw["lean_publish"] = rng.random() < 0.5
    return draw


def _edge_settings(rng: random.Random, topic: str) -> Settings:
    """A draw the cross-field rules take (a reversed pair is redrawn)."""
    for _ in range(50):
        draw = _edges(rng, topic)
        try:
            return Settings(
                host="127.0.0.1", port=free_port(), allow_private_callbacks=True, **draw
            )
        except ValidationError as exc:
            assert "is above" in str(exc), exc  # only the pairs may refuse a draw of bounds
    raise AssertionError("no draw the settings take in 50 tries")


async def _listed(session: aiohttp.ClientSession, url: str) -> set[str]:
    """The locs of a document, through an index (small page settings make one); a 503
    (``document_wait_seconds`` at its minimum: the first build not waited for) is
    asked again, as its ``Retry-After`` says, until the build is served."""
    bodies: list[bytes] = []

    async def served() -> bool:
        async with session.get(url) as resp:
            if resp.status == 503 and "Retry-After" in resp.headers:
                return False
            assert resp.status == 200, url
            bodies.append(await resp.read())
            return True

    await wait_for(served, timeout=30, interval=0.05)
    doc = parse(bodies[-1])
    if not type(doc).is_index:
        return {entry.loc for entry in doc.entries}
    locs: set[str] = set()
    for entry in doc.entries:
        locs |= await _listed(session, entry.loc)
    return locs


async def _serves(settings: Settings, redis_url: str, topic: str) -> None:
    callback = await CallbackServer().start()
    runner, _app = await start_hub(settings, redis_url)
    url = settings.public_url
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as session:
            form = {
                "hub.mode": "subscribe",
                "hub.topic": f"{url}/topics/{topic}",
                "hub.callback": callback.url,
                "hub.secret": "s" * 20,
            }
            async with session.post(url + "/", data=form) as resp:
                assert resp.status == 202, await resp.text()
            await wait_for(lambda: len(callback.verifications) == 1)
            async with session.get(
                f"{url}/topics/{topic}/events", headers={"Accept": "text/event-stream"}
            ) as stream:
                assert stream.status == 200
                body = notification(changes(1, prefix=f"http://example.org/{topic}/"))
                async with session.post(
                    f"{url}/topics/{topic}",
                    data=body,
                    headers={"Content-Type": "application/xml", "Idempotency-Key": topic},
                ) as resp:
                    assert resp.status == 202, await resp.text()
                loc = f"http://example.org/{topic}/0"
                seen = b""
                async with asyncio.timeout(10 * TIME_SCALE):
                    while loc.encode() not in seen:
                        seen += await stream.content.readany()
            await wait_for(lambda: loc in callback.locs, timeout=15)
            for path in ("changelist.xml", "resourcelist.xml"):
                assert loc in await _listed(session, f"{url}/topics/{topic}/{path}"), path
            async with session.get(url + "/metrics") as resp:
                assert resp.status == 200
    finally:
        await runner.cleanup()
        await callback.stop()


async def test_hubs_at_the_edges_of_every_range_serve(redis_url: str) -> None:
    rng = random.Random(2212)
    async with Watchdog() as dog:
        for round_ in range(10):
            topic = f"edges{round_}-{rng.randrange(10**6)}"
            await _serves(_edge_settings(rng, topic), redis_url, topic)
    await dog.sockets_back()


def test_every_number_has_a_range() -> None:
    """What the served fuzz draws from: no number is unbounded (``inf`` would pass)."""
    numbers = [name for name in Settings.model_fields if _bounds(name) is not None]
    assert len(numbers) > 50
