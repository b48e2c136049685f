"""No secret reaches an anonymous reader: callback URLs, private topic names, the admin
views through a proxy, the embedded Redis's port and password. Real hubs on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import stat
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from hub.core.placement import subscription_id
from hub.core.settings import Settings
from hub.store.embedded_redis import AUTH_FILE, EmbeddedRedis
from hub.web.app import RUNTIME
from tests.conftest import Hub, start_hub
from tests.hub.callback_server import CallbackServer
from tests.support import (
    TIME_SCALE,
    HubProcess,
    changes,
    free_port,
    notification,
    wait_for,
    worker_pids,
)
from tests.watchdog import Watchdog

SECRET = "SECRETKEY"
HIDDEN = "hidden-topic"
READER = {"Authorization": "Bearer rt"}
ADMIN = {"Authorization": "Bearer adm"}
XFF = {"X-Forwarded-For": "203.0.113.9"}
PRIVATE_TOPIC = frozenset({("topic", "(private)")})


@pytest.fixture
async def callback() -> AsyncIterator[CallbackServer]:
    # Refuses deliveries: the subscription stays, with a lag, for as long as the test runs.
    cb = await CallbackServer(statuses=[503] * 10_000).start()
    yield cb
    await cb.stop()


@contextlib.asynccontextmanager
async def running(redis_url: str, **overrides: Any) -> AsyncIterator[Hub]:
    """A hub in this process with ``overrides``, as the ``hub`` fixture makes one."""
    settings = Settings(
        host="127.0.0.1", port=free_port(), allow_private_callbacks=True, **overrides
    )
    runner, app = await start_hub(settings, redis_url)
    try:
        async with aiohttp.ClientSession() as session:
            yield Hub(settings.public_url, app, settings, session)
    finally:
        await runner.cleanup()


async def subscribe(
    hub: Hub, topic: str, callback: str, headers: dict[str, str] | None = None
) -> None:
    """Subscribe ``callback`` (query string and all) and wait until its worker runs."""
    form = {"hub.mode": "subscribe", "hub.topic": f"{hub.url}/topics/{topic}"}
    form["hub.callback"] = callback
    async with hub.session.post(hub.url + "/", data=form, headers=headers or {}) as resp:
        assert resp.status == 202, await resp.text()
    await wait_for(lambda: (topic, callback) in hub.app[RUNTIME].delivery.workers)


def series(body: str, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """The samples named ``name`` in a ``/metrics`` body, read by Prometheus's parser."""
    return {
        frozenset(sample.labels.items()): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
        if sample.name == name
    }


async def text(hub: Hub, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    async with hub.session.get(hub.url + path, headers=headers or {}) as resp:
        return resp.status, await resp.text()


# -- /metrics: subscriptions by id, never by callback URL ---------------------------------


async def test_metrics_name_a_subscription_by_id_never_by_its_callback_url(
    hub: Hub, callback: CallbackServer
) -> None:
    url = f"{callback.url}?api_key={SECRET}"
    await subscribe(hub, "t", url)
    await hub.publish("t", notification(changes(3)))
    await wait_for(lambda: callback.refused >= 1)
    status, body = await text(hub, "/metrics")
    assert status == 200
    assert SECRET not in body and callback.url not in body and "api_key" not in body
    sub = subscription_id("t", url)
    assert len(sub) == 12 and int(sub, 16) >= 0
    lag = series(body, "rshub_subscription_lag_events")
    assert lag == {frozenset({("topic", "t"), ("subscription", sub)}): 3.0}
    # The admin views name the id too, so an operator can find the callback behind it.
    status, overview = await text(hub, "/admin/overview.json")
    assert status == 200
    [row] = json.loads(overview)["subscriptions"]
    assert row["id"] == sub and row["callback"] == url


# -- private topics: named only to a token that may read them ------------------------------


async def test_a_private_topic_is_named_only_to_a_token_that_may_read_it(
    redis_url: str, callback: CallbackServer
) -> None:
    async with running(redis_url, topic_read_tokens={HIDDEN: ["rt"]}) as hub:
        for topic in (HIDDEN, "shown"):
            assert (await hub.publish(topic, notification(changes(2)))).status == 202
        await subscribe(hub, HIDDEN, callback.url, READER)
        for path in ("/metrics", "/", "/admin/overview.json", "/healthz"):
            status, body = await text(hub, path)
            assert status == 200, path
            assert HIDDEN not in body and callback.url not in body, path
        _, metrics = await text(hub, "/metrics")
        lengths = series(metrics, "rshub_stream_length")
        assert lengths == {PRIVATE_TOPIC: 2.0, frozenset({("topic", "shown")}): 2.0}
        private = frozenset({("topic", "(private)"), ("subscription", "(private)")})
        assert set(series(metrics, "rshub_subscription_lag_events")) == {private}
        _, overview = await text(hub, "/admin/overview.json")
        assert [t["name"] for t in json.loads(overview)["topics"]] == ["shown"]

        _, metrics = await text(hub, "/metrics", READER)
        lengths = series(metrics, "rshub_stream_length")
        assert lengths[frozenset({("topic", HIDDEN)})] == 2.0 and PRIVATE_TOPIC not in lengths
        status, overview = await text(hub, "/admin/overview.json", READER)
        assert status == 200
        data = json.loads(overview)
        assert {t["name"] for t in data["topics"]} == {HIDDEN, "shown"}
        assert [s["topic"] for s in data["subscriptions"]] == [HIDDEN]
        # One topic's subscriptions need a token that may read it, too.
        status, _ = await text(hub, f"/topics/{HIDDEN}/subscriptions")
        assert status == 401
        status, body = await text(hub, f"/topics/{HIDDEN}/subscriptions", READER)
        assert status == 200 and callback.url in body


async def test_the_admin_token_sees_every_topic_in_metrics(redis_url: str) -> None:
    async with running(redis_url, topic_read_tokens={HIDDEN: ["rt"]}, admin_token="adm") as hub:
        assert (await hub.publish(HIDDEN, notification(changes(1)))).status == 202
        _, anonymous = await text(hub, "/metrics")
        _, admin = await text(hub, "/metrics", ADMIN)
        assert HIDDEN not in anonymous and f'topic="{HIDDEN}"' in admin
        _, wrong = await text(hub, "/metrics", {"Authorization": "Bearer adm2"})
        assert HIDDEN not in wrong


# -- RSHUB_METRICS_TOKEN ------------------------------------------------------------------


async def test_the_metrics_token_guards_metrics(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RSHUB_METRICS_TOKEN", "mt")
    async with running(redis_url, admin_token="adm", topic_read_tokens={HIDDEN: ["rt"]}) as hub:
        assert hub.settings.metrics_token == "mt"
        assert (await hub.publish(HIDDEN, notification(changes(1)))).status == 202
        refused: list[dict[str, str]] = [
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": "Bearer mt2"},
            {"Authorization": "Bearer m"},
            {"Authorization": "Basic bXQ6"},
            {"Authorization": "mt"},
            READER,  # a read token is not a metrics token
        ]
        for headers in refused:
            status, body = await text(hub, "/metrics", headers)
            assert status == 401, headers
            assert "rshub_" not in body and json.loads(body)["status"] == 401, headers
        status, body = await text(hub, "/metrics", {"Authorization": "Bearer mt"})
        assert status == 200 and "rshub_publishes_total" in body
        assert HIDDEN not in body
        assert series(body, "rshub_stream_length") == {PRIVATE_TOPIC: 1.0}
        status, body = await text(hub, "/metrics", ADMIN)
        assert status == 200 and f'topic="{HIDDEN}"' in body


def test_an_empty_metrics_token_is_refused_at_start_up() -> None:
    with pytest.raises(ValueError, match="metrics_token"):
        Settings(metrics_token="")


# -- the loopback exemption is for direct connections only --------------------------------


async def test_a_forwarded_client_is_not_loopback_for_the_admin_views(
    redis_url: str, callback: CallbackServer
) -> None:
    """``--admin-token a --forwarded-allow-ips 127.0.0.1``: a request through the proxy
    with no token gets no callback and no overview."""
    async with running(redis_url, admin_token="a", forwarded_allow_ips=["127.0.0.1"]) as hub:
        url = f"{callback.url}?api_key={SECRET}"
        await subscribe(hub, "t", url)
        for path in ("/admin/overview.json", "/topics/t/subscriptions"):
            for headers in (XFF, {"Forwarded": "for=203.0.113.9"}, {}):
                status, body = await text(hub, path, headers)
                assert status in (401, 403), (path, headers)
                assert SECRET not in body and callback.url not in body
            status, body = await text(hub, path, {"Authorization": "Bearer a", **XFF})
            assert status == 200 and SECRET in body, path


async def test_loopback_stays_exempt_only_when_direct(
    redis_url: str, callback: CallbackServer
) -> None:
    """An open hub without admin token, its trusted proxy elsewhere: a direct loopback
    client may look; the same request with a proxy's headers may not."""
    async with running(redis_url, forwarded_allow_ips=["192.0.2.1"]) as hub:
        await subscribe(hub, "t", f"{callback.url}?api_key={SECRET}")
        for path in ("/admin/overview.json", "/topics/t/subscriptions"):
            status, body = await text(hub, path)
            assert status == 200 and SECRET in body, path
            for headers in (
                XFF,
                {"Forwarded": "for=127.0.0.1"},
                {"X-Forwarded-For": "127.0.0.1"},
                {"X-Real-IP": "127.0.0.1"},
                {"X-Forwarded-Host": "hub.example"},
            ):
                status, body = await text(hub, path, headers)
                assert status == 403 and "loopback" in body, (path, headers)
                assert SECRET not in body
        status, body = await text(hub, "/healthz")
        assert status == 200 and json.loads(body)["redis"] == "ok"
        status, body = await text(hub, "/healthz", XFF)
        assert status == 200 and json.loads(body) == {"status": "ok"}


# -- /healthz and the embedded Redis ------------------------------------------------------


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_public_healthz_says_ok_and_nothing_about_redis(tmp_path: Path) -> None:
    hub = HubProcess(str(tmp_path), None, "--admin-token", "adm").start()
    try:
        owner = json.loads((tmp_path / "redis" / "rshub.lock").read_text())
        port = str(owner["port"])
        status, body = _get(hub.url + "/healthz")
        assert status == 200 and json.loads(body) == {"status": "ok"}
        assert port not in body and "redis" not in body
        status, body = _get(hub.url + "/healthz", {"Authorization": "Bearer adm"})
        details = json.loads(body)
        assert status == 200 and details["redis"] == "ok"
        assert details["embedded_redis"]["port"] == owner["port"]
        # Nor is the password anywhere a local user or the log could show it.
        password = (tmp_path / "redis" / AUTH_FILE).read_text().split()[-1]
        assert hub.proc is not None
        for pid in (hub.proc.pid, details["embedded_redis"]["pid"]):
            assert password.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        assert password not in hub.log()
    finally:
        hub.stop()


def test_workers_get_the_redis_password_through_their_environment(tmp_path: Path) -> None:
    """Any local user can read a command line; workers must not find the password, nor
    the admin and publisher tokens, there."""
    tokens = ("--admin-token", "adm-SECRET", "--token", "pub-SECRET")
    hub = HubProcess(str(tmp_path), None, "--workers", "2", *tokens).start()
    try:
        assert hub.proc is not None
        parent = hub.proc.pid
        wait_until = time.monotonic() + 20 * TIME_SCALE
        while len(worker_pids(parent)) < 2 and time.monotonic() < wait_until:
            time.sleep(0.05)
        workers = worker_pids(parent)
        assert len(workers) == 2
        password = (tmp_path / "redis" / AUTH_FILE).read_text().split()[-1].encode()
        for pid in workers:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            assert b"SECRET" not in cmdline, cmdline
        assert password not in Path(f"/proc/{parent}/cmdline").read_bytes()
        answered = set()
        admin = {"Authorization": "Bearer adm-SECRET"}
        for _ in range(40):  # both workers reach Redis with the password: 200, not 503
            status, body = _get(hub.url + "/healthz", admin)
            assert status == 200, body
            answered.add(json.loads(body)["pid"])
        assert answered <= workers and answered
    finally:
        hub.stop()


def _ask(port: int, command: bytes) -> bytes:
    """One command to Redis in plain RESP, without any client library's retries."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(command)
        return sock.recv(200)


def test_the_embedded_redis_needs_its_password_kept_0600_across_restarts(
    tmp_path: Path,
) -> None:
    server = EmbeddedRedis(tmp_path, appendfsync="always")
    url = server.start()
    try:
        auth = tmp_path / AUTH_FILE
        assert stat.S_IMODE(auth.stat().st_mode) == 0o600
        assert server.password in url and server.password in auth.read_text()
        assert _ask(server.port or 0, b"SET k v\r\n").startswith(b"-NOAUTH")
        assert _ask(server.port or 0, b"AUTH guess\r\n").startswith(b"-WRONGPASS")
        client = redis.Redis.from_url(url)
        assert client.set("k", "v")
        client.close()
    finally:
        server.stop()
    os.chmod(auth, 0o644)  # loosened by hand: tightened again at the next start
    again = EmbeddedRedis(tmp_path)
    assert again.start() == url.replace(f":{server.port}/", f":{again.port}/")
    try:
        assert stat.S_IMODE(auth.stat().st_mode) == 0o600
        client = redis.Redis.from_url(again.url)
        assert client.get("k") == b"v"
        client.close()
    finally:
        again.stop()


# -- a seeded fuzz of the identity headers -------------------------------------------------


def _noise(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("abc019.:;,=[]\"' -_/%") for _ in range(rng.randint(0, n)))


def _headers(rng: random.Random) -> dict[str, str]:
    auth = [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Bearer adm",
        "bearer adm",
        "BEARER  adm ",
        "Bearer adm,Bearer x",
        "Bearer wrong",
        "Bearer rt",
        "Basic YWRtOg==",
        "adm",
        "Bearer " + "a" * 4000,
        "Bearer " + _noise(rng, 40),
    ]
    forwarded_for = [
        "203.0.113.9",
        "127.0.0.1",
        "::1",
        "[::1]",
        "127.0.0.1, 203.0.113.9",
        "203.0.113.9, 127.0.0.1",
        "unknown",
        "",
        _noise(rng, 60),
    ]
    forwarded = [
        "for=203.0.113.9",
        'for="[::1]"',
        "for=127.0.0.1;proto=https;host=hub.example",
        "for=127.0.0.1, for=203.0.113.9",
        ";;;=",
        _noise(rng, 60),
    ]
    headers: dict[str, str] = {}
    value = rng.choice(auth)
    if value is not None:
        headers["Authorization"] = value
    if rng.random() < 0.7:
        headers["X-Forwarded-For"] = rng.choice(forwarded_for)
    if rng.random() < 0.4:
        headers["Forwarded"] = rng.choice(forwarded)
    if rng.random() < 0.2:
        headers["X-Real-IP"] = rng.choice(forwarded_for)
    if not {"X-Forwarded-For", "Forwarded", "X-Real-IP"} & set(headers):
        headers["X-Forwarded-For"] = "203.0.113.9"
    return headers


ROUTES = ["/metrics", "/healthz", "/admin/overview.json", "/topics/t/subscriptions", "/"]


@pytest.mark.parametrize("seed", [7, 1234])
async def test_fuzzed_identity_headers_never_open_the_admin_views_to_a_forwarded_client(
    redis_url: str, callback: CallbackServer, seed: int
) -> None:
    rng = random.Random(seed)
    async with running(
        redis_url,
        admin_token="adm",
        forwarded_allow_ips=["127.0.0.1"],
        topic_read_tokens={HIDDEN: ["rt"]},
    ) as hub:
        url = f"{callback.url}?api_key={SECRET}"
        await subscribe(hub, "t", url)
        assert (await hub.publish(HIDDEN, notification(changes(1)))).status == 202
        async with Watchdog() as dog:
            for _ in range(150):
                headers = _headers(rng)
                path = rng.choice(ROUTES)
                status, body = await text(hub, path, headers)
                assert status < 500, (path, headers, body[:200])
                admin = headers.get("Authorization", "").split() in (
                    ["Bearer", "adm"],
                    ["bearer", "adm"],
                    ["BEARER", "adm"],
                )
                if admin:
                    continue
                assert SECRET not in body and callback.url not in body, (path, headers)
                if headers.get("Authorization", "").split() not in (["Bearer", "rt"],):
                    assert HIDDEN not in body, (path, headers)
                if path == "/healthz":
                    assert status == 200 and json.loads(body) == {"status": "ok"}, headers
                if path in ("/admin/overview.json", "/topics/t/subscriptions"):
                    assert status in (401, 403), (path, headers)
        await dog.sockets_back(slack=8)
