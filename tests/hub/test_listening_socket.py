"""The hub binds an IP address itself (uvloop looked even an address up in its thread pool:
~10 ms of a restart's way to serving), with the options the loop's ``create_server`` sets;
a host name is still resolved by the loop."""

from __future__ import annotations

import errno
import socket

import aiohttp
import pytest

from hub.core.settings import Settings
from hub.web.app import create_app, start
from tests.support import free_port


def _options(sock: socket.socket) -> dict[str, int]:
    got = {
        name: sock.getsockopt(socket.SOL_SOCKET, getattr(socket, name))
        for name in ("SO_REUSEADDR", "SO_REUSEPORT")
    }
    if sock.family == socket.AF_INET6:
        got["IPV6_V6ONLY"] = sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY)
    return got


async def _healthz(url: str) -> int:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/healthz") as resp:
        return resp.status


@pytest.mark.parametrize(
    ("host", "family", "options"),
    [
        ("127.0.0.1", socket.AF_INET, {"SO_REUSEADDR": 1, "SO_REUSEPORT": 1}),
        ("::1", socket.AF_INET6, {"SO_REUSEADDR": 1, "SO_REUSEPORT": 1, "IPV6_V6ONLY": 1}),
    ],
)
async def test_two_processes_share_an_address_with_reuse_port(
    redis_url: str, host: str, family: socket.AddressFamily, options: dict[str, int]
) -> None:
    settings = Settings(host=host, port=free_port(), reuse_port=True)
    started = []
    try:
        for _ in range(2):  # `rshub serve --workers 2`: both bind the one port
            runner, site = await start(create_app(settings, redis_url), shutdown_timeout=2.0)
            started.append(runner)
            (listening,) = site._server.sockets  # type: ignore[union-attr]
            assert listening.family == family
            assert listening.getsockname()[:2] == (host, settings.port)
            assert _options(listening) == options
        assert await _healthz(settings.public_url) == 200
    finally:
        for runner in started:
            await runner.cleanup()


async def test_an_address_in_use_is_refused_with_the_address_named(redis_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        app = create_app(Settings(host="127.0.0.1", port=port), redis_url)
        with pytest.raises(OSError) as refused:
            await start(app, shutdown_timeout=2.0)
    assert refused.value.errno == errno.EADDRINUSE
    assert f"('127.0.0.1', {port})" in str(refused.value)


async def test_a_host_name_is_still_resolved(redis_url: str) -> None:
    settings = Settings(host="localhost", port=free_port())
    runner, site = await start(create_app(settings, redis_url), shutdown_timeout=2.0)
    try:
        assert site._server is not None
        assert {s.getsockname()[1] for s in site._server.sockets} == {settings.port}
        assert await _healthz(f"http://127.0.0.1:{settings.port}") == 200
    finally:
        await runner.cleanup()
