"""``rshub subscribe`` as a user runs it: refusals end it, polling prints what push prints."""

from __future__ import annotations

import orjson
import pytest

from tests.commands import Command
from tests.conftest import Hub
from tests.support import free_port, notification, wait_for


async def publish(hub: Hub, *locs: str) -> list[str]:
    resp = await hub.publish("t", notification([{"loc": loc} for loc in locs]))
    assert resp.status == 202
    ids: list[str] = orjson.loads(await resp.read())["ids"]
    return ids


@pytest.mark.parametrize("via", ["ws", "sse", "poll", "webhook"])
@pytest.mark.parametrize("hub_settings", [{"allow_private_callbacks": True}])
async def test_a_bad_topic_name_ends_subscribe_with_the_hubs_message(hub: Hub, via: str) -> None:
    cmd = await Command("subscribe", "--hub", hub.url, "--topic", "no such!", "--via", via).start()
    try:
        assert await cmd.wait() == 2, cmd.stderr
    finally:
        await cmd.stop()
    assert "invalid topic name" in cmd.stderr
    assert "Capability Lists" not in cmd.stderr and not cmd.lines


@pytest.mark.parametrize("via", ["ws", "sse", "poll"])
async def test_a_bad_since_ends_subscribe_with_the_hubs_message(hub: Hub, via: str) -> None:
    await publish(hub, "http://e.org/a")
    argv = ["--hub", hub.url, "--topic", "t", "--via", via, "--since", "yesterday"]
    cmd = await Command("subscribe", *argv).start()
    try:
        assert await cmd.wait() == 2, cmd.stderr
    finally:
        await cmd.stop()
    assert "HTTP 400" in cmd.stderr and not cmd.lines  # nothing replayed


async def test_poll_starts_at_the_end_and_prints_what_push_prints(hub: Hub) -> None:
    await publish(hub, "http://e.org/old1", "http://e.org/old2")
    argv = ["--hub", hub.url, "--topic", "t", "--interval", "0.1", "--limit", "1", "-v"]
    poll = await Command("subscribe", "--via", "poll", *argv).start()
    push = await Command("subscribe", "--via", "ws", *argv).start()
    try:
        await wait_for(lambda: "now poll" in poll.stderr and "now push" in push.stderr, 20)
        await wait_for(lambda: "polling from the current end" in poll.stderr, 5)
        [new] = await publish(hub, "http://e.org/new")
        assert await poll.wait() == 0 and await push.wait() == 0, poll.stderr + push.stderr
    finally:
        await poll.stop()
        await push.stop()
    assert poll.lines == push.lines, (poll.lines, push.lines)
    [line] = poll.lines
    event = orjson.loads(line)
    assert event["id"] == new and event["topic"] == "t"
    assert event["loc"] == "http://e.org/new" and event["change"] == "updated"
    assert "lastmod" in event


async def test_poll_resumes_after_since(hub: Hub) -> None:
    first, second, third = await publish(hub, "http://e.org/1", "http://e.org/2", "http://e.org/3")
    argv = ["--hub", hub.url, "--topic", "t", "--via", "poll", "--since", first, "--limit", "2"]
    cmd = await Command("subscribe", *argv).start()
    try:
        assert await cmd.wait() == 0, cmd.stderr
    finally:
        await cmd.stop()
    assert [orjson.loads(line)["id"] for line in cmd.lines] == [second, third]


@pytest.mark.parametrize("hub_settings", [{"allow_private_callbacks": True}])
async def test_subscribe_via_webhook_prints_why_the_hub_could_not_verify(hub: Hub) -> None:
    """The reason was only in the hub's log: the command waited, then said it timed out."""
    dead = f"http://127.0.0.1:{free_port()}/cb"  # where the hub's verification GET fails
    cmd = await Command(
        "subscribe", "--hub", hub.url, "--topic", "t", "--via", "webhook", "--no-fallback",
        "--callback-url", dead,
    ).start()  # fmt: skip
    try:  # it says why, then retries push as after any loss
        await wait_for(lambda: "could not verify" in cmd.stderr, 20)
    finally:
        await cmd.stop()
    [line] = [x for x in cmd.stderr.splitlines() if "could not verify" in x]
    assert "hub could not verify subscribe: the verification GET failed" in line, cmd.stderr
    assert "cannot connect to 127.0.0.1" in line, line
    assert "did not verify subscribe within" not in cmd.stderr
