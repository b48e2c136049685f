"""Fixtures: a real redis-server for the session, a real hub on 127.0.0.1 per test."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
import redis
from aiohttp import web

from hub.core import metrics
from hub.core.settings import Settings
from hub.store.embedded_redis import EmbeddedRedis
from hub.web.app import RUNTIME, create_app, start
from tests.redis_cluster import redis_cluster  # noqa: F401  (a session fixture)
from tests.redis_transports import TlsCluster, TlsFront, UnixRedis
from tests.support import TIME_SCALE, free_port
from tests.watchdog import POOLED_PORTS


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test has its own node id. pytest 9 names schemathesis's per-operation items
    (``tests/hub/test_openapi.py``) all alike, and pytest-xdist's ``--dist loadfile`` keys
    its work by node id: it would run the first of them and silently drop the rest. So the
    operation goes back into the id, and a duplicate id left anywhere stops the run."""
    for item in items:
        label = getattr(item, "operation_label", None)
        if label and "[" not in item.nodeid:
            item._id = item._id.with_params(label)  # type: ignore[attr-defined]
    ids = Counter(item.nodeid for item in items)
    twice = sorted(nodeid for nodeid, n in ids.items() if n > 1)
    if twice:
        raise pytest.UsageError(f"tests sharing a node id (one would not run): {twice[:5]}")


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    """A plain client session for the test, closed after it."""
    async with aiohttp.ClientSession() as client:
        yield client


@pytest.fixture(autouse=True)
def _hermetic_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ``RSHUB_*`` variable of the caller's changes a test (only the time scale)."""
    for name in list(os.environ):
        if name.startswith("RSHUB_") and name != "RSHUB_TEST_TIME_SCALE":
            monkeypatch.delenv(name)


@pytest.fixture(scope="session", autouse=True)
def _prometheus_series() -> None:
    """The Prometheus series defined before any test, so that a test may read a series or
    prometheus_client's registry at once (a hub defines them a second after its start:
    tests/hub/test_startup_imports.py checks that, in child processes)."""
    metrics.load()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """The load's factor on every timeout, taken as the test starts and kept to its end
    (:meth:`tests.support.TimeScale.hold`), pytest-timeout's limit included: a test that
    takes 40 s on an idle machine must not be cut at 60 s, mid-write, on one running two
    suites at once. Outermost (``tryfirst``), so pytest-timeout reads the scaled limit."""
    TIME_SCALE.hold()
    marker = item.get_closest_marker("timeout")
    base = float(marker.args[0]) if marker and marker.args else _DEFAULT_TIMEOUT
    item.add_marker(pytest.mark.timeout(base * TIME_SCALE), append=False)
    try:
        yield
    finally:
        TIME_SCALE.release()


#: pytest-timeout's limit on an idle machine (``timeout`` in pyproject.toml).
_DEFAULT_TIMEOUT = 60.0


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"))
    server.start()
    assert server.port is not None
    POOLED_PORTS.add(server.port)
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: EmbeddedRedis) -> str:
    """The session's Redis, emptied for this test."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    return redis_server.url


@pytest.fixture(scope="session")
def unix_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UnixRedis]:
    """A redis-server on a unix socket only, for the session."""
    with UnixRedis(tmp_path_factory.mktemp("unix-redis")) as server:
        yield server


@pytest.fixture(scope="session")
def tls_redis(unix_redis: UnixRedis, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The ``rediss://`` URL of ``unix_redis`` behind TLS (:class:`TlsFront`)."""
    front = TlsFront(unix_redis, tmp_path_factory.mktemp("redis-tls")).start()
    yield front.url
    front.stop()


@pytest.fixture(scope="session")
def mtls_redis(
    unix_redis: UnixRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TlsFront]:
    """``unix_redis`` behind TLS that asks for a client certificate (:class:`TlsFront`)."""
    front = TlsFront(unix_redis, tmp_path_factory.mktemp("redis-mtls"), client_certificates=True)
    yield front.start()
    front.stop()


@pytest.fixture(scope="session")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsCluster]:
    """A three-master Redis Cluster reached only over TLS (:class:`TlsCluster`)."""
    cluster = TlsCluster(tmp_path_factory.mktemp("redis-tls-cluster")).start()
    yield cluster
    cluster.stop()


@pytest.fixture(params=["tcp", "unix", "tls"])
def any_redis_url(request: pytest.FixtureRequest, redis_url: str) -> str:
    """A Redis URL over each transport the hub speaks (the unix one emptied for the test);
    the TCP one is ``redis_url``."""
    if request.param == "tcp":
        return redis_url
    unix: UnixRedis = request.getfixturevalue("unix_redis")
    client = redis.Redis.from_url(unix.url)
    client.flushall()
    client.close()
    return unix.url if request.param == "unix" else str(request.getfixturevalue("tls_redis"))


@dataclass
class Hub:
    url: str
    app: web.Application
    settings: Settings
    session: aiohttp.ClientSession

    @property
    def redis(self) -> Any:
        """The hub's own Redis client (for looking at what it stored)."""
        return self.app[RUNTIME].connections.main

    async def publish(self, topic: str, body: bytes, **headers: str) -> aiohttp.ClientResponse:
        resp = await self.session.post(
            f"{self.url}/topics/{topic}",
            data=body,
            headers={"Content-Type": "application/xml", **headers},
        )
        await resp.read()
        return resp


async def start_hub(settings: Settings, redis_url: str) -> tuple[web.AppRunner, web.Application]:
    """The hub as ``rshub serve`` builds it (guarded site, timeouts), in this process."""
    app = create_app(settings, redis_url)
    runner, _site = await start(app, shutdown_timeout=2.0)
    return runner, app


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    """Override in a test module (or parametrize) to change the hub's settings."""
    return {}


@pytest.fixture
async def hub(redis_url: str, hub_settings: dict[str, Any]) -> AsyncIterator[Hub]:
    # The tests' callbacks listen on 127.0.0.1: allowed explicitly (the default refuses them).
    overrides = {"allow_private_callbacks": True, **hub_settings}
    settings = Settings(host="127.0.0.1", port=free_port(), **overrides)
    runner, app = await start_hub(settings, redis_url)
    async with aiohttp.ClientSession() as session:
        yield Hub(settings.public_url, app, settings, session)
    await runner.cleanup()
