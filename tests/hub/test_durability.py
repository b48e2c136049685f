"""With ``appendfsync always``, a 202 means the changes are on disk: SIGKILL loses nothing.

(SIGKILL of redis-server cannot tell ``always`` from ``everysec``: the kernel still holds
what was written. What ``everysec`` can lose, about one second, is lost only when the machine
itself goes down; docs/hub.md says so. This test pins the promise made for ``always``.)
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import aiohttp
import redis

from hub.core.settings import Settings
from hub.store import keys
from hub.store.embedded_redis import EmbeddedRedis
from tests.conftest import start_hub
from tests.support import changes, free_port, notification


async def test_sigkill_of_redis_right_after_a_202_loses_nothing(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "redis", appendfsync="always")
    url = server.start()
    settings = Settings(host="127.0.0.1", port=free_port(), appendfsync="always")
    runner, _app = await start_hub(settings, url)
    published: list[str] = []
    try:
        async with aiohttp.ClientSession() as session:
            for batch in range(10):
                async with session.post(
                    f"{settings.public_url}/topics/t",
                    data=notification(changes(100, start=batch * 100)),
                    headers={"Content-Type": "application/xml"},
                ) as resp:
                    assert resp.status == 202
                    published += (await resp.json())["ids"]
            pid = server.pid
            assert pid is not None
            os.kill(pid, signal.SIGKILL)  # right after the last 202
            server.stop()
    finally:
        await runner.cleanup()

    again = EmbeddedRedis(tmp_path / "redis", appendfsync="always")
    client = redis.Redis.from_url(again.start())
    try:
        stored = [keys.text(i) for i, _ in client.xrange(keys.events("t"))]
        assert stored == published and len(stored) == 1000
        assert client.hlen(keys.resources("t")) == 1000
    finally:
        client.close()
        again.stop()
