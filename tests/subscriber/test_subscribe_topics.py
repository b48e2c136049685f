"""``rshub subscribe`` of several topics over one connection (``--topic`` repeated,
``--topic-prefix``), as a user runs it against a real hub: every change of each topic
printed once, naming its topic; a kill and a restart with ``--state`` resume every topic
from the composite id saved, nothing lost or repeated."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from hub.core.events import parse_id
from hub.core.stream_positions import decode
from hub.web.streams import STREAMING
from subscriber.position import EventCursorFile
from tests.commands import Command
from tests.conftest import Hub
from tests.support import changes, notification, wait_for

TOPICS = [f"m-{i:02}" for i in range(20)]


async def publish(hub: Hub, topic: str, n: int = 1, start: int = 0) -> list[str]:
    resp = await hub.publish(topic, notification(changes(n, start=start)))
    assert resp.status == 202, await resp.text()
    ids: list[str] = orjson.loads(await resp.read())["ids"]
    return ids


def _followed(hub: Hub) -> list[str]:
    return sorted(s.feed.topic for s in hub.app[STREAMING].closing._streams)


def _printed(cmd: Command) -> list[tuple[str, str]]:
    return [(e["topic"], e["id"]) for e in map(orjson.loads, cmd.lines)]


def _saved_through(state: Path, lasts: dict[str, str]) -> bool:
    """Whether the composite id in ``state`` is at or past each topic's ``lasts`` id."""
    if not state.exists():
        return False
    resume_id = EventCursorFile(str(state)).load().event_id
    if resume_id is None or not resume_id.startswith("m1."):
        return False
    base, listed = decode(resume_id, what="id", max_bytes=10**6, max_topics=10**6)
    return all(listed.get(t, base) >= parse_id(last) for t, last in lasts.items())


@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_twenty_topics_on_one_connection_each_change_once_and_resumed_after_a_kill(
    hub: Hub, tmp_path: Path, via: str
) -> None:
    for topic in TOPICS:
        await publish(hub, topic)  # they exist; the stream starts at their end
    state = tmp_path / "state.json"
    argv = ["subscribe", "--hub", hub.url, "--via", via, "--state", str(state)]
    for topic in TOPICS:
        argv += ["--topic", topic]
    first = await Command(*argv).start()
    try:
        await wait_for(state.exists, 20)  # the opening id, saved: the stream is open
        published: dict[str, list[str]] = {}
        for topic in TOPICS:
            published[topic] = await publish(hub, topic, 3, start=10)
        await wait_for(lambda: len(first.lines) >= 60, 20)
        lasts = {t: ids[-1] for t, ids in published.items()}
        await wait_for(lambda: _saved_through(state, lasts), 10)
        assert first.proc is not None and first.proc.returncode is None, first.stderr
    finally:
        await first.stop()  # SIGKILL
    got = _printed(first)
    assert len(got) == len(set(got)) == 60
    assert sorted(got) == sorted((t, i) for t, ids in published.items() for i in ids)

    away = {topic: await publish(hub, topic, 2, start=20) for topic in TOPICS}  # while away
    second = await Command(*argv).start()
    try:
        await wait_for(lambda: len(second.lines) >= 40, 20)
        late = await publish(hub, "m-07", 1, start=30)
        await wait_for(lambda: len(second.lines) >= 41, 20)
    finally:
        await second.stop()
    again = _printed(second)
    expected = [(t, i) for t, ids in away.items() for i in ids] + [("m-07", late[0])]
    assert len(again) == len(set(again)) == 41 and sorted(again) == sorted(expected)
    for topic in TOPICS:  # each topic in order
        theirs = [i for t, i in again if t == topic]
        assert theirs == sorted(theirs, key=parse_id)


async def test_a_topic_prefix_follows_the_topics_under_it_those_published_later_too(
    hub: Hub,
) -> None:
    await publish(hub, "q-a")
    argv = ["subscribe", "--hub", hub.url, "--via", "sse", "--topic-prefix", "q-", "-v"]
    cmd = await Command(*argv, "--topic", "other", "--limit", "3").start()
    try:
        # Open once the hub follows what it found under the prefix, and the topic named.
        await wait_for(lambda: _followed(hub) == ["other", "q-a"], 20)
        expected: list[tuple[str, str]] = []
        expected += [("q-a", i) for i in await publish(hub, "q-a", 1, start=3)]
        await publish(hub, "not-q")
        expected += [("q-new", i) for i in await publish(hub, "q-new", 1)]
        expected += [("other", i) for i in await publish(hub, "other", 1)]
        assert await cmd.wait() == 0, cmd.stderr
    finally:
        await cmd.stop()
    assert sorted(_printed(cmd)) == sorted(expected)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--topic", "a", "--topic", "b", "--via", "poll"], "use --via ws or --via sse"),
        (["--topic-prefix", "p", "--via", "webhook"], "use --via ws or --via sse"),
        (["--topic", "a", "--topic", "b/c"], "--topic: invalid topic name"),
        (["--topic-prefix", "/x"], "--topic-prefix: '/x' cannot start a topic name"),
        (["--topic", "a", "--topic", "b", "--change", "moved"], "--change:"),
    ],
)
async def test_several_topics_usage_errors_name_the_option(
    hub: Hub, extra: list[str], says: str
) -> None:
    cmd = await Command("subscribe", "--hub", hub.url, *extra).start()
    try:
        assert await cmd.wait() == 2, cmd.stderr
    finally:
        await cmd.stop()
    assert says in cmd.stderr and not cmd.lines


@pytest.mark.parametrize("hub_settings", [{"admin_token": "adm"}])
@pytest.mark.parametrize("via", ["ws", "sse"])
async def test_a_topic_deleted_is_said_and_the_others_go_on(hub: Hub, via: str) -> None:
    await publish(hub, "d-a")
    await publish(hub, "d-b")
    argv = ["subscribe", "--hub", hub.url, "--via", via, "--topic", "d-a", "--topic", "d-b"]
    cmd = await Command(*argv, "--limit", "1").start()
    try:
        await wait_for(lambda: _followed(hub) == ["d-a", "d-b"], 20)
        headers = {"Authorization": "Bearer adm"}
        async with hub.session.delete(f"{hub.url}/admin/topics/d-b", headers=headers) as resp:
            assert resp.status == 200
        await wait_for(lambda: "topic d-b was deleted; following the others" in cmd.stderr, 20)
        [new] = await publish(hub, "d-a", 1, start=5)
        assert await cmd.wait() == 0, cmd.stderr
    finally:
        await cmd.stop()
    assert _printed(cmd) == [("d-a", new)]
