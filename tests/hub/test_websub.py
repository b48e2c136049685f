"""WebSub scenarios against a real hub, a real Redis and real callback sockets."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.scrape import scrape, value
from tests.support import changes, notification, wait_for


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"retry_base_seconds": 0.05, "retry_max_seconds": 0.2}


@pytest.fixture
async def callback() -> AsyncIterator[CallbackServer]:
    server = await CallbackServer().start()
    yield server
    await server.stop()


async def subscribe(hub: Hub, cb: CallbackServer, topic: str = "t", **extra: str) -> None:
    form = {
        "hub.mode": "subscribe",
        "hub.topic": f"{hub.url}/topics/{topic}",
        "hub.callback": cb.url,
        **extra,
    }
    before = len(cb.verifications)
    resp = await hub.session.post(hub.url + "/", data=form)
    assert resp.status == 202, await resp.text()
    await wait_for(lambda: len(cb.verifications) > before)
    # Activation follows the verification answer: wait until the worker runs.
    await wait_for(lambda: any(k[1] == cb.url for k in hub_workers(hub)))


def hub_workers(hub: Hub) -> dict[tuple[str, str], Any]:
    from hub.web.app import RUNTIME

    return hub.app[RUNTIME].delivery.workers


async def test_plain_subscription_gets_changes_in_order(hub: Hub, callback: CallbackServer) -> None:
    await subscribe(hub, callback)
    v = callback.verifications[0]
    assert v["hub.mode"] == "subscribe" and v["hub.topic"] == f"{hub.url}/topics/t"
    assert int(v["hub.lease_seconds"]) > 0 and v["hub.challenge"]
    published = []
    for i in range(5):
        body = await (await hub.publish("t", notification(changes(3, start=i * 3)))).json()
        published += body["ids"]
    await wait_for(lambda: len(callback.ids) >= 15)
    assert callback.ids == published
    assert callback.locs == [c["loc"] for c in changes(15)]
    d = callback.deliveries[0]
    # Exactly what the hub serves at the topic URI (WebSub §7, websub.rocks compares them).
    topic = await hub.session.get(f"{hub.url}/topics/t")
    assert (
        d.headers["Content-Type"]
        == topic.headers["Content-Type"]
        == "application/xml; charset=utf-8"
    )
    assert 'rel="hub"' in d.headers["Link"] and f"<{hub.url}/topics/t>" in d.headers["Link"]
    assert "X-Hub-Signature" not in d.headers


async def test_subscription_with_secret_is_signed(hub: Hub, callback: CallbackServer) -> None:
    await subscribe(hub, callback, **{"hub.secret": "s3cret"})
    await hub.publish("t", notification(changes(4)))
    await wait_for(lambda: len(callback.ids) >= 4)
    checks = list(callback.signature_ok("s3cret"))
    assert checks and all(checks)
    assert not any(callback.signature_ok("wrong"))


async def test_unknown_parameters_are_ignored(hub: Hub, callback: CallbackServer) -> None:
    await subscribe(hub, callback, **{"hub.foo": "bar", "utm_source": "x"})
    await hub.publish("t", notification(changes(2)))
    await wait_for(lambda: len(callback.ids) >= 2)


async def test_resubscription_keeps_one_delivery_per_change(
    hub: Hub, callback: CallbackServer
) -> None:
    await subscribe(hub, callback)
    await hub.publish("t", notification(changes(2)))
    await wait_for(lambda: len(callback.ids) >= 2)
    await subscribe(hub, callback, **{"hub.lease_seconds": "7200"})
    assert callback.verifications[-1]["hub.lease_seconds"] == "7200"
    assert len(hub_workers(hub)) == 1
    await hub.publish("t", notification(changes(3, start=2)))
    await wait_for(lambda: len(callback.ids) >= 5)
    assert callback.locs == [c["loc"] for c in changes(5)]
    assert len(set(callback.ids)) == len(callback.ids) == 5


async def test_unsubscription_stops_delivery(hub: Hub, callback: CallbackServer) -> None:
    await subscribe(hub, callback)
    await hub.publish("t", notification(changes(1)))
    await wait_for(lambda: len(callback.ids) >= 1)
    form = {
        "hub.mode": "unsubscribe",
        "hub.topic": f"{hub.url}/topics/t",
        "hub.callback": callback.url,
    }
    assert (await hub.session.post(hub.url + "/", data=form)).status == 202
    await wait_for(lambda: callback.verifications[-1]["hub.mode"] == "unsubscribe")
    await wait_for(lambda: not hub_workers(hub))
    # A second subscriber proves later changes flow; the unsubscribed one gets none.
    other = await CallbackServer().start("/other")
    try:
        await subscribe(hub, other)
        await hub.publish("t", notification(changes(2, start=1)))
        await wait_for(lambda: len(other.ids) >= 2)
        assert len(callback.ids) == 1
    finally:
        await other.stop()


async def test_callback_not_echoing_challenge_never_gets_data(hub: Hub) -> None:
    liar = await CallbackServer(echo_challenge=False).start()
    honest = await CallbackServer().start("/honest")
    try:
        form = {
            "hub.mode": "subscribe",
            "hub.topic": f"{hub.url}/topics/t",
            "hub.callback": liar.url,
        }
        assert (await hub.session.post(hub.url + "/", data=form)).status == 202
        await wait_for(lambda: len(liar.verifications) == 1)
        await subscribe(hub, honest)
        await hub.publish("t", notification(changes(3)))
        await wait_for(lambda: len(honest.ids) >= 3)
        assert liar.deliveries == [] and liar.refused == 0
        assert list(hub_workers(hub)) == [("t", honest.url)]
    finally:
        await liar.stop()
        await honest.stop()


async def test_failing_callback_retries_and_gets_everything_in_order(hub: Hub) -> None:
    cb = await CallbackServer(statuses=[500, 500, 500]).start()
    try:
        await subscribe(hub, cb)
        published = []
        for i in range(4):
            published += (
                await (await hub.publish("t", notification(changes(2, start=2 * i)))).json()
            )["ids"]
        await wait_for(lambda: len(cb.ids) >= 8)
        assert cb.refused == 3
        assert cb.ids == published
    finally:
        await cb.stop()


async def test_410_gone_ends_the_subscription(hub: Hub) -> None:
    cb = await CallbackServer(statuses=[410]).start()
    try:
        await subscribe(hub, cb)
        await hub.publish("t", notification(changes(1)))
        await wait_for(lambda: not hub_workers(hub))
        from hub.store import keys

        assert await hub.redis.hlen(keys.subscriptions("t")) == 0
        await hub.publish("t", notification(changes(1, start=1)))
        assert cb.refused == 1 and cb.deliveries == []
    finally:
        await cb.stop()


async def test_since_extension_replays_history(hub: Hub, callback: CallbackServer) -> None:
    ids = (await (await hub.publish("t", notification(changes(4)))).json())["ids"]
    await subscribe(hub, callback, **{"hub.since": ids[1]})
    await wait_for(lambda: len(callback.ids) >= 2)
    assert callback.ids == ids[2:]


async def test_invalid_topic_is_denied(hub: Hub, callback: CallbackServer) -> None:
    form = {
        "hub.mode": "subscribe",
        "hub.topic": f"{hub.url}/topics/-bad name",
        "hub.callback": callback.url,
    }
    resp = await hub.session.post(hub.url + "/", data=form)
    assert resp.status == 202
    await wait_for(lambda: len(callback.verifications) == 1)
    denial = callback.verifications[0]
    assert denial["hub.mode"] == "denied" and "topic name" in denial["hub.reason"]


@pytest.mark.parametrize(
    ("form", "word"),
    [
        ({"hub.mode": "subscribe", "hub.topic": "http://x/topics/t"}, "hub.callback"),
        (
            {"hub.mode": "subscribe", "hub.callback": "ftp://x/cb", "hub.topic": "http://x"},
            "hub.callback",
        ),
        ({"hub.mode": "dance"}, "hub.mode"),
        (
            {
                "hub.mode": "subscribe",
                "hub.callback": "http://127.0.0.1:1/cb",
                "hub.topic": "http://h/topics/t",
                "hub.secret": "x" * 200,
            },
            "hub.secret",
        ),
        (
            {
                "hub.mode": "subscribe",
                "hub.callback": "http://127.0.0.1:1/cb",
                "hub.topic": "http://h/topics/t",
                "hub.lease_seconds": "soon",
            },
            "hub.lease_seconds",
        ),
    ],
)
async def test_bad_subscription_requests_are_400(hub: Hub, form: dict[str, str], word: str) -> None:
    resp = await hub.session.post(hub.url + "/", data=form)
    assert resp.status == 400
    assert word in (await resp.json())["error"]


class TestPrivateCallbacks:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"allow_private_callbacks": False}

    async def test_loopback_callback_refused_unless_allowed(
        self, hub: Hub, callback: CallbackServer
    ) -> None:
        form = {
            "hub.mode": "subscribe",
            "hub.topic": f"{hub.url}/topics/t",
            "hub.callback": callback.url,
        }
        resp = await hub.session.post(hub.url + "/", data=form)
        assert resp.status == 400
        assert "a loopback address" in (await resp.json())["error"]
        assert callback.verifications == []


class TestSuspension:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"retry_base_seconds": 0.02, "retry_max_seconds": 0.05, "suspend_after_failures": 3}

    async def test_failing_subscription_is_suspended_then_resumes(self, hub: Hub) -> None:

        from hub.store.subscriptions import State, SubscriptionStore

        store = SubscriptionStore(hub.redis)
        cb = await CallbackServer(statuses=[500] * 6).start()  # 503 never suspends
        try:
            await subscribe(hub, cb)
            ids = (await (await hub.publish("t", notification(changes(3)))).json())["ids"]

            async def suspended() -> bool:
                sub = await store.get("t", cb.url)
                return sub is not None and sub.state is State.SUSPENDED

            await wait_for(suspended)
            await wait_for(lambda: len(cb.ids) >= 3)
            assert cb.ids == ids

            async def resumed() -> bool:  # saved after the 2xx, so just after the callback
                sub = await store.get("t", cb.url)
                return sub is not None and sub.state is State.ACTIVE and sub.failures == 0

            await wait_for(resumed)
        finally:
            await cb.stop()


async def test_subscriptions_survive_restart_and_resume_from_cursor(
    redis_url: str, callback: CallbackServer
) -> None:
    import aiohttp

    from hub.core.settings import Settings
    from tests.conftest import start_hub
    from tests.support import free_port

    settings = Settings(host="127.0.0.1", port=free_port(), allow_private_callbacks=True)
    runner, app = await start_hub(settings, redis_url)
    async with aiohttp.ClientSession() as session:
        hub = Hub(settings.public_url, app, settings, session)
        await subscribe(hub, callback)
        first = (await (await hub.publish("t", notification(changes(2)))).json())["ids"]
        await wait_for(lambda: len(callback.ids) >= 2)
        await runner.cleanup()
        # While the hub is down nothing is lost: publish via a second hub process later.
        runner, app = await start_hub(settings, redis_url)
        hub = Hub(settings.public_url, app, settings, session)
        second = (await (await hub.publish("t", notification(changes(2, start=2)))).json())["ids"]
        await wait_for(lambda: len(callback.ids) >= 4)
        assert callback.ids == first + second
        await runner.cleanup()


async def test_subscription_introspection_and_metrics(hub: Hub, callback: CallbackServer) -> None:
    before = await scrape(hub)  # counters are per process: earlier tests moved them
    await subscribe(hub, callback, **{"hub.secret": "hidden"})
    ids = (await (await hub.publish("t", notification(changes(2)))).json())["ids"]
    await wait_for(lambda: len(callback.ids) >= 2)
    body = await (await hub.session.get(f"{hub.url}/topics/t/subscriptions")).json()
    [row] = body["subscriptions"]
    assert row["callback"] == callback.url and row["state"] == "active"
    assert row["secret"] is True and "hidden" not in str(body)

    async def cursor_at_end() -> bool:
        rows = await (await hub.session.get(f"{hub.url}/topics/t/subscriptions")).json()
        return rows["subscriptions"][0]["cursor"] == ids[-1]

    await wait_for(cursor_at_end)
    after = await scrape(hub)
    assert value(after, "rshub_subscriptions", state="active") == 1
    delivered = "rshub_delivered_changes_total"
    assert value(after, delivered) - value(before, delivered) == 2


class TestLeasesAndBatches:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {
            "lease_seconds_min": 1,
            "delivery_batch_max_changes": 10,
            "delivery_batch_max_bytes": 4096,
        }

    async def test_lease_expiry_ends_the_subscription(
        self, hub: Hub, callback: CallbackServer
    ) -> None:
        from hub.store import keys

        await subscribe(hub, callback, **{"hub.lease_seconds": "1"})
        assert callback.verifications[-1]["hub.lease_seconds"] == "1"
        await wait_for(lambda: not hub_workers(hub), timeout=5)
        assert await hub.redis.hlen(keys.subscriptions("t")) == 0

    async def test_backlog_is_batched_by_count_and_bytes(
        self, hub: Hub, callback: CallbackServer
    ) -> None:
        ids = (await (await hub.publish("t", notification(changes(25)))).json())["ids"]
        await subscribe(hub, callback, **{"hub.since": "0"})
        await wait_for(lambda: len(callback.ids) >= 25)
        assert callback.ids == ids
        assert max(len(d.ids) for d in callback.deliveries) <= 10
        assert len(callback.deliveries) >= 3
        # A bigger change set: the byte budget cuts batches before the count does.
        big = [{**c, "loc": c["loc"] + "/" + "y" * 1500} for c in changes(6, start=100)]
        more = (await (await hub.publish("t", notification(big))).json())["ids"]
        await wait_for(lambda: len(callback.ids) >= 31)
        assert callback.ids == ids + more
        assert all(len(d.body) < 4096 + 2048 for d in callback.deliveries)
        assert max(len(d.ids) for d in callback.deliveries[-3:]) <= 3


async def test_large_batches_fit_default_receiver_header_limits(
    hub: Hub, callback: CallbackServer
) -> None:
    # Regression: a header listing all 1,000 ids of a batch (about 17 KB) was refused by
    # aiohttp's default 8,190-byte limit and the hub retried forever.
    ids = (await (await hub.publish("t", notification(changes(1000)))).json())["ids"]
    await subscribe(hub, callback, **{"hub.since": "0"})
    await wait_for(lambda: len(callback.ids) >= 1000)
    assert callback.ids == ids and callback.refused == 0
    assert max(len(d.ids) for d in callback.deliveries) > 500


async def test_changes_published_after_the_202_are_delivered(hub: Hub) -> None:
    """Verification is asynchronous: a new subscription starts where the topic stood when
    the subscriber got its 202, not when the hub finished verifying."""
    slow = CallbackServer()
    release = asyncio.Event()
    original = slow._verify

    async def slow_verify(request: Any) -> Any:
        await asyncio.wait_for(release.wait(), 10)
        return await original(request)

    slow._verify = slow_verify  # type: ignore[method-assign]
    await slow.start()
    try:
        await hub.publish("t", notification(changes(1)))  # before: not delivered
        form = {
            "hub.mode": "subscribe",
            "hub.topic": f"{hub.url}/topics/t",
            "hub.callback": slow.url,
        }
        assert (await hub.session.post(hub.url + "/", data=form)).status == 202
        after = await (await hub.publish("t", notification(changes(2, start=1)))).json()
        release.set()
        await wait_for(lambda: len(slow.ids) >= 2)
        assert slow.ids == after["ids"]
    finally:
        await slow.stop()


async def test_a_subscribe_verified_after_a_later_unsubscribe_is_not_stored(
    hub: Hub, caplog: pytest.LogCaptureFixture
) -> None:
    """Requests are verified concurrently: a subscribe whose callback answers only after
    the subscriber's later unsubscribe was verified and stored must not revive it (what
    ``rshub subscribe`` stopped right after subscribing ran into)."""
    caplog.set_level(logging.INFO, logger="hub.live.delivery")
    cb = CallbackServer()
    release = asyncio.Event()
    original = cb._verify

    async def held_subscribe(request: Any) -> Any:
        if request.query.get("hub.mode") == "subscribe":
            async with asyncio.timeout(10):
                await release.wait()
        return await original(request)

    cb._verify = held_subscribe  # type: ignore[method-assign]
    await cb.start()
    try:
        await hub.publish("t", notification(changes(1)))
        form = {"hub.topic": f"{hub.url}/topics/t", "hub.callback": cb.url}
        for mode in ("subscribe", "unsubscribe"):
            resp = await hub.session.post(hub.url + "/", data={"hub.mode": mode, **form})
            assert resp.status == 202, await resp.text()

        def logged(word: str) -> bool:
            return any(r.getMessage().startswith(word) for r in caplog.records)

        await wait_for(lambda: logged("unsubscribed"))
        release.set()
        await wait_for(lambda: logged("verified subscribe") or logged("subscribed"))
        assert not logged("subscribed"), [r.getMessage() for r in caplog.records]
        listed = await (await hub.session.get(f"{hub.url}/topics/t/subscriptions")).json()
        assert listed["subscriptions"] == [] and not hub_workers(hub)
        # A later subscribe is stored as usual.
        await subscribe(hub, cb)
        await hub.publish("t", notification(changes(1, start=1)))
        await wait_for(lambda: len(cb.ids) >= 1)
    finally:
        await cb.stop()
