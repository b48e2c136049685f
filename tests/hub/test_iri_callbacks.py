"""IRI callbacks (RFC 3987): stored and delivered as their URI, or refused naming the rule.

On a hub that wrote the request line as Latin-1, ``/uni/ā中`` crash-looped its delivery
worker (thousands of ERROR lines a second) and ``é`` went out as a raw 0xE9 byte.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from hub.store.subscriptions import Subscription
from hub.web.app import RUNTIME
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.hostile_callback import HostileCallback
from tests.support import changes, notification, wait_for
from tests.watchdog import Watchdog


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"retry_base_seconds": 0.05, "retry_max_seconds": 0.2}


async def ok(answer: Any) -> None:
    answer.write(b"HTTP/1.1 204 No Content\r\n\r\n")


@pytest.mark.parametrize(
    ("path", "encoded"),
    [("/uni/ā中", "/uni/%C4%81%E4%B8%AD"), ("/caf\u00e9?q=\u00e9", "/caf%C3%A9?q=%C3%A9")],
)
async def test_an_iri_callback_is_stored_and_delivered_as_its_uri(
    hub: Hub, path: str, encoded: str
) -> None:
    callback = await HostileCallback(ok).start()  # plays a plain 204: records request targets
    iri = f"http://127.0.0.1:{callback.port}{path}"
    uri = f"http://127.0.0.1:{callback.port}{encoded}"
    try:
        async with Watchdog(max_errors=0):
            form = {
                "hub.mode": "subscribe",
                "hub.topic": f"{hub.url}/topics/t",
                "hub.callback": iri,
            }
            resp = await hub.session.post(hub.url + "/", data=form)
            assert resp.status == 202, await resp.text()
            await wait_for(lambda: ("t", uri) in hub.app[RUNTIME].delivery.workers)
            assert await hub.app[RUNTIME].subscriptions.get("t", uri) is not None
            ids = (await (await hub.publish("t", notification(changes(2)))).json())["ids"]
            await wait_for(lambda: callback.posts == [ids[0]])
            worker = hub.app[RUNTIME].delivery.workers[("t", uri)]
            await wait_for(lambda: worker.delivered == 2)
            assert worker.sub.failures == 0
        # the verification GET and the POST both asked for the percent-encoded target
        assert callback.targets[0].startswith(encoded.split("?")[0])
        assert callback.targets[-1] == encoded
        assert all(t.isascii() for t in callback.targets)
    finally:
        await callback.stop()


async def test_a_raw_iri_stored_earlier_is_delivered_without_a_crash_loop(hub: Hub) -> None:
    """Defence in depth: a callback stored before IRIs were converted still works."""
    callback = await HostileCallback(ok).start()
    iri = f"http://127.0.0.1:{callback.port}/uni/ā中"
    try:
        async with Watchdog(max_errors=0):
            now = time.time()
            sub = Subscription(
                topic="t",
                topic_url=f"{hub.url}/topics/t",
                callback=iri,
                lease_seconds=3600,
                expires_at=now + 3600,
                secret=None,
                created_at=now,
            )
            await hub.app[RUNTIME].subscriptions.activate(sub, "0-0")
            await wait_for(lambda: ("t", iri) in hub.app[RUNTIME].delivery.workers, 15)
            await hub.publish("t", notification(changes(1)))
            await wait_for(lambda: len(callback.posts) == 1)
        assert callback.targets == ["/uni/%C4%81%E4%B8%AD"]
    finally:
        await callback.stop()


@pytest.mark.parametrize(
    ("callback", "rule"),
    [
        ("http://\u2603.invalid/cb", "not a valid internationalized domain name (IDNA2008"),
        ("http://cb.invalid/a%zz", "'%' not followed by two hex digits (RFC 3986 §2.1)"),
    ],
)
async def test_an_iri_that_has_no_uri_is_refused_naming_the_rule(
    hub: Hub, callback: str, rule: str
) -> None:
    server = await CallbackServer().start()
    try:
        form = {
            "hub.mode": "subscribe",
            "hub.topic": f"{hub.url}/topics/t",
            "hub.callback": callback,
        }
        resp = await hub.session.post(hub.url + "/", data=form)
        assert resp.status == 400
        assert rule in (await resp.json())["error"]
        assert not hub.app[RUNTIME].delivery.workers
    finally:
        await server.stop()
