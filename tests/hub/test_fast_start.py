"""A (re)started hub serves before its delivery recovery is done, and the recovery still
recovers every subscription; ``rshub serve`` imports only what serving needs."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
import tempfile
import time

import aiohttp

from hub.core.settings import Settings
from hub.store.subscriptions import Subscription, SubscriptionStore
from hub.web.app import RUNTIME
from tests.conftest import Hub, start_hub
from tests.hub.callback_server import CallbackServer
from tests.support import TIME_SCALE, HubProcess, changes, free_port, notification, wait_for

TOPICS = 10
PER_TOPIC = 20


def _settings() -> Settings:
    return Settings(
        host="127.0.0.1",
        port=free_port(),
        allow_private_callbacks=True,
        changelist_scan_seconds=0,
    )


async def test_the_hub_serves_before_its_recovery_and_then_recovers_every_subscription(
    redis_url: str,
) -> None:
    callback = await CallbackServer().start()
    try:
        # A first hub takes one change per topic, with nobody subscribed yet.
        runner, app = await start_hub(_settings(), redis_url)
        event_ids = {}
        async with aiohttp.ClientSession() as session:
            for t in range(TOPICS):
                async with session.post(
                    f"{app[RUNTIME].settings.public_url}/topics/t{t}",
                    data=notification(changes(1, prefix=f"http://example.org/t{t}/")),
                    headers={"Content-Type": "application/xml"},
                ) as resp:
                    assert resp.status == 202
                    (event_ids[f"t{t}"],) = (await resp.json())["ids"]
        store = SubscriptionStore(app[RUNTIME].connections.main)
        # Subscriptions the hub must recover at its next start, each due that change.
        subs = [
            Subscription(
                topic=f"t{t}",
                topic_url=f"http://127.0.0.1/topics/t{t}",
                callback=f"{callback.url}?n={n}",
                lease_seconds=3600,
                expires_at=time.time() + 3600,
            )
            for t in range(TOPICS)
            for n in range(PER_TOPIC)
        ]
        for sub in subs:
            await store.activate(sub, "0")
        await runner.cleanup()

        runner, app = await start_hub(_settings(), redis_url)
        try:
            runtime = app[RUNTIME]
            # Listening, while the recovery round has not started every worker: start-up
            # did not wait for it (it waited for the whole round before).
            assert len(runtime.delivery.workers) < len(subs)
            async with aiohttp.ClientSession() as session:
                async with session.get(f"{runtime.settings.public_url}/healthz") as resp:
                    assert resp.status == 200
            await wait_for(
                lambda: len(runtime.delivery.workers) == len(subs), timeout=30 * TIME_SCALE
            )

            await wait_for(lambda: len(callback.ids) >= len(subs), timeout=30 * TIME_SCALE)
            assert sorted(callback.ids) == sorted(event_ids[s.topic] for s in subs), (
                "each subscription got its topic's change exactly once"
            )
        finally:
            await runner.cleanup()
    finally:
        await callback.stop()


async def test_rshub_serve_answers_a_publish_and_a_subscriber_soon_after_it_starts() -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        hub = HubProcess(data_dir)
        began = time.monotonic()
        hub.start()
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(f"{hub.url}/topics/fast/events") as stream:
                    assert stream.status == 200
                    async with session.post(
                        f"{hub.url}/topics/fast",
                        data=notification(changes(1)),
                        headers={"Content-Type": "application/xml"},
                    ) as resp:
                        assert resp.status == 202
                    line = b""
                    while not line.startswith(b"data:"):
                        line = await asyncio.wait_for(stream.content.readline(), 10 * TIME_SCALE)
            # Generous for a busy machine (a quiet one: well under a second, embedded Redis
            # included); it fails if start-up waits on something slow again.
            assert time.monotonic() - began < 15 * TIME_SCALE
            assert b'"loc":"http://example.org/r0"' in line
        finally:
            hub.stop()


def test_rshub_serve_imports_no_client_command() -> None:
    probe = (
        "import sys, rshub.cli\n"
        "try:\n"
        "    rshub.cli.main(['serve', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in ('publisher.cli', 'subscriber.cli', 'shtab')"
        " if m in sys.modules), file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60 * TIME_SCALE
    )
    assert done.returncode == 0, done.stderr
    assert "usage: rshub serve" in done.stdout
    assert done.stderr.strip() == "[]", done.stderr


def test_the_other_commands_and_the_version_are_still_there() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rshub", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    for command in ("serve", "publish", "subscribe", "sync", "completion"):
        assert command in done.stdout
    done = subprocess.run(
        [sys.executable, "-m", "rshub", "completion", "bash"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "rshub" in done.stdout, done.stderr


async def test_the_system_tls_context_is_made_after_start_and_verifies(hub: Hub) -> None:
    connections = hub.app[RUNTIME].client.connections
    await wait_for(lambda: connections._ssl is not None, timeout=10 * TIME_SCALE)
    context = await connections._tls()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
