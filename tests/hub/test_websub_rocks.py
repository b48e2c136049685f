"""websub.rocks' hub tests 100-106 against a real hub, its publisher and subscriber on 127.0.0.1.

Each test runs one of the suite's scenarios the two ways the suite offers
(:mod:`tests.hub.websub_rocks` is the suite's site, check for check):

* ``suite``: the suite is the publisher. Its topic is a feed it serves (HTML, plain text or
  JSON), declared plain WebSub on the hub (``RSHUB_WEBSUB_TOPICS``); it publishes by a ping
  (``hub.mode=publish&hub.topic=...``), and the hub fetches the feed and delivers it.
* ``source``: the topic is the hub's own and the suite discovers the hub and the topic from
  its ``Link`` headers. For 100-104 it is a ResourceSync topic the Source publishes change
  notifications to; for 105 and 106 a plain WebSub topic of the hub whose publisher POSTs
  the content (a fat ping), which the hub serves at the topic URI.

Every delivery must pass every check of the suite's subscriber: a body (equal to the topic's,
trimmed; for ``source`` at least 5 % alike), a ``Content-Type`` equal to the topic's
byte for byte, ``Link`` ``rel=hub`` equal to the hub URL and a ``rel=self``, and a
signature exactly when a secret was given, verified with it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import Hub
from tests.hub.websub_rocks import CONTENT_TYPES, RocksSite, Run
from tests.support import changes, free_port, notification, wait_for

#: The hub's own plain WebSub topics (``source`` runs of 105 and 106).
OWN_PLAIN = {105: "text-notes", 106: "json-notes"}
#: What their publisher POSTs, its version number filled in.
PLAIN_BODIES = {
    105: b"Notes\n=====\n\nSimplicity is prerequisite for reliability. (version %d)\n",
    106: b'{"title": "Notes", "items": [{"id": %d, "content_text": "hello"}]}\n',
}


@pytest.fixture
def site_port() -> int:
    return free_port()


@pytest.fixture
def hub_settings(site_port: int) -> dict[str, Any]:
    return {
        "websub_topics": [f"http://127.0.0.1:{site_port}/hub/", *OWN_PLAIN.values()],
        "retry_base_seconds": 0.05,
        "retry_max_seconds": 0.2,
    }


@pytest.fixture
async def site(site_port: int) -> AsyncIterator[RocksSite]:
    server = await RocksSite(site_port).start()
    yield server
    await server.stop()


@dataclass
class Publisher:
    """How a scenario's topic is published: by the suite (a ping) or by a Source."""

    start: Callable[[int], Awaitable[Run]]
    publish: Callable[[Run], Awaitable[None]]


@pytest.fixture(params=["suite", "source"])
def publisher(request: pytest.FixtureRequest, hub: Hub, site: RocksSite) -> Publisher:
    if request.param == "suite":

        async def start(num: int) -> Run:
            run = await site.post_start(num, hub=f"{hub.url}/")
            assert isinstance(run, Run), run
            return run

        async def ping(run: Run) -> None:
            status, answer = await site.post_publisher(run)
            assert status == 202, answer

        return Publisher(start, ping)

    published = [0]

    async def publish_own(num: int) -> None:
        published[0] += 1
        if num in OWN_PLAIN:
            body = PLAIN_BODIES[num] % published[0]
            async with hub.session.post(
                f"{hub.url}/topics/{OWN_PLAIN[num]}",
                data=body,
                headers={"Content-Type": CONTENT_TYPES[num]},
            ) as resp:
                assert resp.status == 202, await resp.text()
        else:
            resp = await hub.publish("t", notification(changes(1, start=published[0])))
            assert resp.status == 202

    async def start_own(num: int) -> Run:
        await publish_own(num)  # the topic exists (the suite discovers it from its answer)
        topic = f"{hub.url}/topics/{OWN_PLAIN.get(num, 't')}"
        run = await site.post_start(num, topic=topic)
        assert isinstance(run, Run), run
        assert run.hub == f"{hub.url}/" and run.topic == topic
        return run

    async def publish_run(run: Run) -> None:
        await publish_own(run.num)

    return Publisher(start_own, publish_run)


async def subscribed(site: RocksSite, run: Run, action: str = "subscribe") -> None:
    """The suite's subscription step: queued (202), then a verification that passes."""
    before = len(run.of("verify_success"))
    result = await site.post_subscribe(run, action)
    assert result["result"] == "Queued", result
    await wait_for(lambda: len(run.of("verify_success")) > before or run.of("verify_error"))
    assert not run.of("verify_error"), run.of("verify_error")
    verified = run.of("verify_success")[-1]
    assert verified["mode"] == action
    if action == "subscribe":  # the lease: the suite requires it, the Recommendation too
        assert verified["lease_seconds"].isdigit() and int(verified["lease_seconds"]) > 0


async def delivered_ok(run: Run, count: int = 1) -> dict[str, Any]:
    """Wait for the ``count``-th notification; it must pass every check of the suite."""
    await wait_for(lambda: len(run.notifications) >= count)
    note = run.notifications[count - 1]
    assert note["error"] is False, note
    assert run.self_link_ok(), run.links
    return note


async def listing(hub: Hub, run: Run) -> dict[str, Any]:
    """The hub's listing of the run's topic's subscriptions (and its last event id)."""
    from hub.core.topics import HubUrls

    name = HubUrls(hub.url).name_from_url(run.topic)
    async with hub.session.get(f"{hub.url}/topics/{name}/subscriptions") as resp:
        assert resp.status == 200, await resp.text()
        return dict(await resp.json())


async def subscriptions_of(hub: Hub, run: Run) -> list[dict[str, Any]]:
    return list((await listing(hub, run))["subscriptions"])


async def test_100_typical_subscriber_request(site: RocksSite, publisher: Publisher) -> None:
    run = await publisher.start(100)
    await subscribed(site, run)
    await publisher.publish(run)
    note = await delivered_ok(run)
    assert "X-Hub-Signature" not in str(note) and not run.secret


async def test_101_subscription_with_secret(site: RocksSite, publisher: Publisher) -> None:
    run = await publisher.start(101)
    assert len(run.secret) == 20
    await subscribed(site, run)
    await publisher.publish(run)
    await delivered_ok(run)


async def test_102_subscriber_sends_additional_parameters(
    site: RocksSite, publisher: Publisher
) -> None:
    run = await publisher.start(102)
    await subscribed(site, run)
    await publisher.publish(run)
    await delivered_ok(run)


async def test_103_resubscribes_before_expiration(
    hub: Hub, site: RocksSite, publisher: Publisher
) -> None:
    run = await publisher.start(103)
    await subscribed(site, run)
    await subscribed(site, run)  # again, before the lease ends: the same subscription
    assert len(run.of("verify_success")) == 2
    await publisher.publish(run)
    await delivered_ok(run)
    rows = await subscriptions_of(hub, run)
    assert [r["callback"] for r in rows] == [site.callback(run)]

    async def delivered_through_the_end() -> bool:
        topic = await listing(hub, run)
        return bool(topic["last_id"]) and topic["subscriptions"][0]["cursor"] == topic["last_id"]

    await wait_for(delivered_through_the_end)
    assert len(run.notifications) == 1  # one subscription: one delivery


async def test_104_unsubscription(hub: Hub, site: RocksSite, publisher: Publisher) -> None:
    run = await publisher.start(104)
    await subscribed(site, run)
    await publisher.publish(run)
    await delivered_ok(run)
    await subscribed(site, run, "unsubscribe")
    await wait_for(lambda: _no_subscription(hub, site, run))
    # A second subscriber of the same topic proves that the next publish is delivered;
    # the unsubscribed callback gets nothing of it.
    witness = site.follower(run)
    await subscribed(site, witness)
    await publisher.publish(run)
    await delivered_ok(witness)
    assert len(run.notifications) == 1


async def _no_subscription(hub: Hub, site: RocksSite, run: Run) -> bool:
    return site.callback(run) not in [r["callback"] for r in await subscriptions_of(hub, run)]


async def test_105_plaintext_topic(site: RocksSite, publisher: Publisher) -> None:
    run = await publisher.start(105)
    await subscribed(site, run)
    await publisher.publish(run)
    note = await delivered_ok(run)
    assert note["content_type"] == "text/plain;charset=UTF-8"


async def test_106_json_topic(site: RocksSite, publisher: Publisher) -> None:
    run = await publisher.start(106)
    await subscribed(site, run)
    await publisher.publish(run)
    note = await delivered_ok(run)
    assert note["content_type"] == "application/json"
