"""Connections to Redis, made in one place, and the store layer's error family.

The hub holds two clients: one for ordinary commands (with a socket timeout, so a stalled
Redis turns into an error instead of a hung request) and one for ``XREAD BLOCK`` only, which
must be allowed to wait longer than any timeout.

A Redis Cluster is named by a ``redis+cluster://host:port`` URL (any one node; the others
are discovered) or by ``RSHUB_REDIS_CLUSTER=true`` with a plain ``redis://`` URL, and uses
redis-py's cluster client. The hub needs no cross-slot operation: a topic's keys share its
hash slot, and the few hub-wide keys are each used alone.

A Redis behind **Sentinel** is named by a ``redis+sentinel://`` URL (the form is in
:mod:`hub.core.sentinel_url`) and uses redis-py's Sentinel client
(:mod:`hub.store.sentinels`): every connection, the blocking ones and
:mod:`hub.store.script_pipe`'s included, asks the Sentinels for the master's address
when it connects, so after a failover each new connection reaches the promoted replica,
and the old master's connections fail (it died) or answer ``READONLY`` (it was demoted),
which drops them.

**A Redis that restarted** (the embedded one is restarted by its supervisor) leaves every
pooled connection dead. A request must not fail on one: a pooled connection is checked as
it is taken from the pool, and one Redis closed is replaced by a fresh connection before
anything is written to it. That retry is safe for every command, a non-idempotent publish
included, because nothing was sent on the dead connection: a command is never re-sent
after it was written (the server may have run it before the connection broke; such a
publish answers 503, and its client retries with its ``Idempotency-Key``). redis-py makes
that check only while its maintenance notifications (a Redis Enterprise feature) are off,
so they are turned off here; :mod:`hub.store.script_pipe` checks its own connection the same
way.
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
import time
from typing import Any, TypeAlias

import redis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import AuthenticationError, NoPermissionError, RedisError

from hub.core import sentinel_url
from hub.core.exceptions import RedisUnavailable
from hub.core.retrying import retrying
from hub.store.sentinels import Sentinels
from rsclient.backoff import Backoff

log = logging.getLogger(__name__)

#: Every failure of the store layer; the web layer maps it to 503 in one place.
StoreError = RedisError

#: A client of one Redis or of a Redis Cluster: the store modules take either.
Client: TypeAlias = Redis | RedisCluster

CLUSTER_SCHEME = "redis+cluster://"


def is_cluster_url(url: str) -> bool:
    return url.startswith(CLUSTER_SCHEME)


def is_sentinel_url(url: str) -> bool:
    return sentinel_url.is_sentinel(url)


def sentinel_for(url: str) -> tuple[Sentinels, sentinel_url.SentinelUrl]:
    """The Sentinel client of a ``redis+sentinel://`` URL (its own connections to the
    Sentinels, closed by its owner), and the URL read."""
    spec = sentinel_url.parse(url)
    options: dict[str, Any] = {"socket_timeout": 2.0, "socket_connect_timeout": 2.0}
    if spec.sentinel_password:
        options["password"] = spec.sentinel_password
        options["username"] = spec.sentinel_username
    return Sentinels(list(spec.sentinels), sentinel_kwargs=options), spec


def _master_of(sentinel: Sentinels, spec: sentinel_url.SentinelUrl, **options: Any) -> Redis:
    """A client of the master the Sentinels name for the service, asked again at each new
    connection (:class:`redis.asyncio.sentinel.SentinelConnectionPool`)."""
    tls: dict[str, Any] = {"ssl": True, **dict(spec.tls_options)} if spec.tls else {}
    client: Redis = sentinel.master_for(
        spec.service,
        db=spec.db,
        username=spec.username,
        password=spec.password,
        **_checked_pool(),
        **_named(),
        **tls,
        **options,
    )
    return client


def connect(url: str, *, cluster: bool = False, **options: Any) -> Client:
    """A client for ``url``: a cluster client for ``redis+cluster://`` or ``cluster=True``
    (``redis+sentinel://`` URLs: :class:`Connections`)."""
    if is_cluster_url(url) or cluster:
        plain = "redis://" + url.removeprefix(CLUSTER_SCHEME) if is_cluster_url(url) else url
        return RedisCluster.from_url(plain, **_named(), **options)
    return Redis.from_url(url, **_checked_pool(), **_named(), **options)


def refused_for_good(exc: BaseException) -> bool:
    """Whether Redis answered and refused the hub in a way waiting cannot change: its
    credentials (``WRONGPASS``, ``NOAUTH``, ``NOPERM``) or a TLS certificate the hub does
    not trust (redis-py raises its own error, the ``ssl`` one in its chain). A server that
    closes the TLS handshake (it wants a client certificate) looks like a Redis going away,
    and is waited for."""
    seen: BaseException | None = exc
    for _ in range(8):  # a bounded walk of the chain of causes
        if seen is None:
            return False
        if isinstance(seen, (AuthenticationError, NoPermissionError, ssl.SSLCertVerificationError)):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class _Refused(Exception):
    """Carries a :func:`refused_for_good` error past the retrying loop."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error


def _named() -> dict[str, Any]:
    """redis-py names itself to Redis (``CLIENT SETINFO``) with its version, which it looks
    up in the installed package's metadata for every new connection (~8 ms of CPU each: the
    first two on a restart's way to serving, one per connection the pools add later). The
    same name and version, looked up once."""
    try:
        from redis.driver_info import DriverInfo
    except ImportError:  # a redis-py without it names itself its own (older) way
        return {}
    return {"driver_info": DriverInfo(lib_version=redis.__version__)}


def _checked_pool() -> dict[str, Any]:
    """Options under which redis-py's pool replaces a connection Redis closed (see the
    module docstring) instead of handing it out. With maintenance notifications on (its
    default, ``"auto"``, even for RESP2, where none can arrive) it skips that check, and
    after a Redis restart nearly every pooled command failed."""
    try:
        from redis.maint_notifications import MaintNotificationsConfig
    except ImportError:  # a redis-py without them always checks
        return {}
    return {"maint_notifications_config": MaintNotificationsConfig(enabled=False)}


class Connections:
    """The hub's Redis clients for one Redis (or Redis Cluster) URL."""

    def __init__(self, url: str, *, cluster: bool = False) -> None:
        self.url = url
        self.cluster = cluster or is_cluster_url(url)
        self._sentinel: Sentinels | None = None
        self.main: Client
        self.blocking: Client
        if is_sentinel_url(url):
            self._sentinel, spec = sentinel_for(url)
            self.main = _master_of(
                self._sentinel,
                spec,
                max_connections=512,
                health_check_interval=30,
                socket_timeout=10,
            )
            self.blocking = _master_of(
                self._sentinel,
                spec,
                socket_timeout=None,
                health_check_interval=30,
                max_connections=2**31 - 1,
            )
        elif self.cluster:
            self.main = connect(url, cluster=True, socket_timeout=10, max_connections=512)
            self.blocking = connect(url, cluster=True, socket_timeout=None)
        else:
            self.main = connect(
                url, max_connections=512, health_check_interval=30, socket_timeout=10
            )
            # One XREAD BLOCK per followed topic holds a connection: no pool cap (redis-py
            # defaults to 100, which starved every topic past the hundredth).
            self.blocking = connect(
                url, socket_timeout=None, health_check_interval=30, max_connections=2**31 - 1
            )

    async def ping(self) -> None:
        await self.main.ping()

    async def wait_ready(
        self, within: float, first_delay: float = 0.25, max_delay: float = 5.0
    ) -> None:
        """Ping until Redis answers, backing off (doubling up to ``max_delay``); after
        ``within`` seconds raise :class:`RedisUnavailable`. A hub started beside its Redis
        (containers, service managers) thus waits for it instead of exiting; but a Redis
        that answers and refuses the hub (:func:`refused_for_good`) is an error at once."""
        deadline = time.monotonic() + within
        attempt = 0

        async def ping() -> None:
            nonlocal attempt
            attempt += 1
            try:
                await asyncio.wait_for(self.main.ping(), timeout=max(1.0, max_delay))
            except (RedisError, OSError, TimeoutError) as exc:
                if refused_for_good(exc):
                    raise _Refused(exc) from None
                if time.monotonic() >= deadline:
                    raise RedisUnavailable(
                        f"Redis at {_redacted(self.url)} (RSHUB_REDIS_URL) did not answer within "
                        f"{within:g}s ({attempt} attempts): {exc}"
                    ) from None
                raise

        def until_deadline(delay: float) -> float:  # the last attempt is at the deadline
            return max(0.0, min(delay, deadline - time.monotonic()))

        def failed(exc: Exception, delay: float) -> None:
            log.warning(
                "Redis at %s not reachable (attempt %d: %s); retrying in %.2fs",
                _redacted(self.url),
                attempt,
                exc,
                until_deadline(delay),
            )

        try:
            await retrying(
                ping,
                Backoff(first_delay, max_delay, jitter=0.0),
                retry_on=(RedisError, OSError, TimeoutError),
                log=None,
                failed=failed,
                pause=lambda delay: asyncio.sleep(until_deadline(delay)),
            )
        except _Refused as refused:
            raise refused.error from None
        if attempt > 1:
            log.info("Redis at %s answered after %d attempts", _redacted(self.url), attempt)

    async def close(self) -> None:
        """Close every client, each even if another's close fails (then raise that)."""
        closing = [self.main.aclose(), self.blocking.aclose()]
        if self._sentinel is not None:
            closing.append(self._sentinel.aclose())
        results = await asyncio.gather(*closing, return_exceptions=True)
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            raise failed


def _redacted(url: str) -> str:
    """``url`` without a password (``redis://:secret@host`` -> ``redis://:***@host``)."""
    url = re.sub(r"(sentinel_password=)[^&#]*", r"\1***", url)
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}"
