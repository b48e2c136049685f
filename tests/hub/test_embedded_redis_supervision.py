"""The embedded redis-server is supervised: a killed server is reaped and restarted on the
same port and data, and stopping never waits out a restart back-off."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from hub.store.embedded_redis import EmbeddedRedis
from tests.support import TIME_SCALE, wait_for


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except OSError:
        return False


async def _reads(client: aioredis.Redis, key: str, value: bytes) -> bool:
    try:
        return bool(await client.get(key) == value)
    except (RedisError, OSError):
        return False


@pytest.mark.timeout(30)
async def test_killed_redis_is_reaped_and_restarted_with_its_data(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path, appendfsync="always")
    server.start()
    port = server.port
    supervisor = asyncio.create_task(server.supervise())
    client = aioredis.Redis.from_url(server.url, socket_timeout=1)
    try:
        await client.set("k", b"written before the crash")
        old = server.pid
        assert old is not None and server.status.state == "running"
        os.kill(old, signal.SIGKILL)

        await wait_for(lambda: server.status.restarts == 1, timeout=10)
        # the client's pooled connection died with the server: the first use may fail
        await wait_for(lambda: _reads(client, "k", b"written before the crash"), timeout=5)

        status = server.status
        assert status.state == "running" and status.restarts == 1
        assert status.last_exit == "killed by SIGKILL" and status.last_exit_status == -9
        assert server.port == port and server.pid not in (None, old)
        with pytest.raises(ChildProcessError):  # already reaped by the supervisor
            os.waitpid(old, os.WNOHANG)  # noqa: ASYNC222 (WNOHANG never blocks)
        assert not _zombie(old)
        assert status.as_dict()["restarts"] == 1
    finally:
        await client.aclose()
        server.stop()
        await asyncio.wait_for(supervisor, 2 * TIME_SCALE)
    stopped = server.status
    assert stopped.state == "stopped" and stopped.pid is None


@pytest.mark.timeout(30)
async def test_stop_during_a_restart_back_off_ends_promptly(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path, restart_backoff=(60.0, 60.0))
    server.start()
    supervisor = asyncio.create_task(server.supervise())
    old = server.pid
    assert old is not None
    os.kill(old, signal.SIGKILL)
    await wait_for(lambda: server.status.state == "restarting", timeout=5)

    started = time.monotonic()
    server.stop()
    await asyncio.wait_for(supervisor, 1.0 * TIME_SCALE)
    assert time.monotonic() - started < 1.0 * TIME_SCALE
    status = server.status
    assert status.state == "stopped" and status.restarts == 0 and server.pid is None
    assert status.last_exit == "killed by SIGKILL" and not _zombie(old)
    again = EmbeddedRedis(tmp_path)  # stop() released the data directory
    again.start()
    again.stop()


@pytest.mark.timeout(30)
async def test_failed_restarts_back_off_until_the_port_is_free_again(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path, restart_backoff=(0.5, 1.0))
    server.start()
    assert server.port is not None
    supervisor = asyncio.create_task(server.supervise())
    squatter = socket.socket()
    try:
        old = server.pid
        assert old is not None
        os.kill(old, signal.SIGKILL)

        def squat() -> bool:  # take the port the moment the dead server lets go of it
            try:
                squatter.bind(("127.0.0.1", server.port or 0))
            except OSError:
                return False
            squatter.listen()
            return True

        await wait_for(squat, timeout=5, interval=0.005)
        await wait_for(lambda: server.status.last_error is not None, timeout=10)
        status = server.status
        assert status.state == "restarting" and status.restarts == 0
        assert "in use" in (status.last_error or "")

        squatter.close()
        await wait_for(lambda: server.status.state == "running", timeout=10)
        assert server.status.restarts == 1 and server.status.last_error is None
        client = aioredis.Redis.from_url(server.url)
        assert await client.ping()
        await client.aclose()
    finally:
        squatter.close()
        server.stop()
        await asyncio.wait_for(supervisor, 2 * TIME_SCALE)


@pytest.mark.timeout(30)
async def test_supervise_returns_on_its_stop_event_and_leaves_redis_running(
    tmp_path: Path,
) -> None:
    with EmbeddedRedis(tmp_path) as server:
        stop = asyncio.Event()
        supervisor = asyncio.create_task(server.supervise(stop))
        await wait_for(lambda: server.supervised, timeout=5)
        stop.set()
        await asyncio.wait_for(supervisor, 1.0 * TIME_SCALE)
        assert not server.supervised and server.status.state == "running"
        client = aioredis.Redis.from_url(server.url)
        assert await client.ping()
        await client.aclose()
