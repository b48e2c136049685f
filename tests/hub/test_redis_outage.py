"""Redis going away: clear 503s, nothing half-stored, and recovery once it is back."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from hub.core.settings import Settings
from hub.store.embedded_redis import EmbeddedRedis
from tests.conftest import start_hub
from tests.support import changes, free_port, notification, wait_for


@pytest.mark.timeout(60)
async def test_publish_during_redis_outage_is_503_then_recovers(tmp_path: Path) -> None:
    redis = EmbeddedRedis(tmp_path / "redis", appendfsync="always")
    redis.start()
    settings = Settings(host="127.0.0.1", port=free_port())
    runner, _app = await start_hub(settings, redis.url)
    url = settings.public_url
    try:
        async with aiohttp.ClientSession() as session:

            async def publish(start: int) -> aiohttp.ClientResponse:
                async with session.post(
                    f"{url}/topics/t",
                    data=notification(changes(2, start=start)),
                    headers={"Content-Type": "application/xml"},
                ) as resp:
                    await resp.read()
                    return resp

            assert (await publish(0)).status == 202
            redis.stop()
            down = await publish(2)
            assert down.status == 503
            assert "storage unavailable" in (await down.json())["error"]
            async with session.get(f"{url}/healthz") as health:
                assert health.status == 503 and "unreachable" in (await health.json())["redis"]

            redis.start()  # same port, same data directory

            async def recovered() -> bool:
                return (await publish(4)).status == 202

            await wait_for(recovered, timeout=20, interval=0.2)
            async with session.get(f"{url}/topics/t/changelist.xml") as resp:
                assert resp.status == 200
    finally:
        await runner.cleanup()
        redis.stop()
