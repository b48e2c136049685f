"""A newcomer's mistakes with the client commands: each fails fast, or waits, and says so once.

Every command runs as a real process (``python -m rshub``) against a real hub on loopback,
a closed port, or a slow Source; what it prints on stderr is counted line by line.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import re
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest
from aiohttp import web

from tests.commands import Command
from tests.conftest import Hub
from tests.publisher.helpers import serve, stored_events
from tests.support import TIME_SCALE, free_port, notification, wait_for

#: Every client command, with the flags it needs besides --hub.
COMMANDS = {
    "publish": ["--topic", "t", "--loc", "http://e.org/a"],
    "subscribe": ["--topic", "t"],
    "sync": ["--topic", "t", "--dest", "{tmp}/m"],
    "wikipedia": ["--topic", "t", "--replay", "sample", "--state", "{tmp}/w.json"],
    "bridge": ["--topic", "t", "--source", "http://source.invalid/cl.xml", "--once"],
}


def running(cmd: Command) -> bool:
    return cmd.proc is not None and cmd.proc.returncode is None


def empty(directory: Path) -> bool:
    return not any(directory.iterdir())


def stderr_lines(cmd: Command) -> list[str]:
    return [line for line in cmd.stderr.splitlines() if line.strip()]


async def finished(cmd: Command, timeout: float = 20.0) -> tuple[int, float]:
    began = time.monotonic()
    await cmd.start()
    try:
        code = await cmd.wait(timeout)
    finally:
        await cmd.stop()
    return code, time.monotonic() - began


@pytest.mark.parametrize(
    "hub_url",
    [
        "127.0.0.1:{port}",
        "http://127.0.0.1:{port}/topics/demo",
        "ftp://127.0.0.1:{port}",
        # Hosts the resolver's IDNA step refuses: a traceback (subscribe) or retries until
        # killed (publish), before.
        "http://" + "a" * 64 + ".invalid:{port}",
        "http://hub..invalid:{port}",
    ],
    ids=["no-scheme", "topic-url", "not-http", "long-label", "empty-label"],
)
@pytest.mark.parametrize("command", sorted(COMMANDS))
async def test_a_hub_url_that_cannot_work_is_a_usage_error_at_once(
    command: str, hub_url: str, tmp_path: Path
) -> None:
    url = hub_url.format(port=free_port())  # nothing listens: any attempt would only wait
    flags = [f.format(tmp=tmp_path) for f in COMMANDS[command]]
    cmd = Command(command, "--hub", url, *flags)
    code, elapsed = await finished(cmd)
    assert code == 2, cmd.stderr
    [line] = stderr_lines(cmd)
    assert line.startswith(f"rshub {command}: --hub {url!r}"), line
    if "/topics/" in url:
        assert f"give --hub {url.split('/topics')[0]}" in line
    assert elapsed < 5 * TIME_SCALE  # no connection attempted, no retry
    assert empty(tmp_path)  # no mirror, no state file


async def test_publish_to_a_hub_that_is_down_fails_within_2s_with_one_line() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    cmd = Command("publish", "--hub", dead, "--topic", "t", "--loc", "http://e.org/a")
    code, elapsed = await finished(cmd)
    assert code == 1, cmd.stderr
    [line] = stderr_lines(cmd)  # no retry warnings, no ERROR log repeating the last line
    # One quick retry, then the reason (it waited 5 s of retries, 8.7 s in all, before).
    match = re.fullmatch(
        rf"rshub publish: cannot reach the hub at {re.escape(dead)} "
        r"\(2 attempts in (\d+\.\d)s\): ClientConnectorError: Cannot connect to .*",
        line,
    )
    assert match is not None, line
    assert float(match[1]) < 2, line  # the time spent trying, start-up aside
    assert elapsed < 2 + 10 * TIME_SCALE, elapsed  # a Python start-up on a busy machine


async def test_publish_with_retry_for_waits_that_long_for_a_hub_that_is_down() -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    cmd = Command(
        "publish", "--hub", dead, "--topic", "t", "--loc", "http://e.org/a", "--retry-for", "1"
    )
    code, _ = await finished(cmd)
    assert code == 1, cmd.stderr
    line = stderr_lines(cmd)[-1]
    match = re.fullmatch(r"rshub publish: gave up after (\d+) attempts in (\d+\.\d)s: .*", line)
    # More than the quick retry; stopped before the next delay would pass the second.
    assert match is not None and int(match[1]) > 2 and float(match[2]) <= 1.0, line


async def watch_then_interrupt(cmd: Command, text: str, window: float = 2.0) -> int:
    """Start ``cmd``, wait until it says ``text``, watch it for ``window`` s, then SIGINT.

    The window is what is observed (several retries at --interval 0.1), not a settling
    delay: on a slow machine fewer retries happen, and the assertions still hold.
    """
    await cmd.start()
    try:
        await wait_for(lambda: text in cmd.stderr or not running(cmd), 20)
        assert cmd.proc is not None and cmd.proc.returncode is None, cmd.stderr
        await asyncio.sleep(window)
        _elapsed, code = await cmd.interrupt()
    finally:
        await cmd.stop()
    return code


@pytest.mark.parametrize("via", ["ws", "poll", "webhook"])
async def test_subscribe_to_an_unreachable_hub_says_once_that_it_waits(via: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    cmd = Command(
        "subscribe", "--hub", dead, "--topic", "t", "--via", via,
        "--interval", "0.1", "--push-retry", "0.1",
    )  # fmt: skip
    assert await watch_then_interrupt(cmd, "waiting for it") == 130
    lines = stderr_lines(cmd)
    assert len(lines) == 1, lines
    assert "cannot reach the hub" in lines[0] and "Cannot connect" in lines[0]


async def test_sync_to_an_unreachable_hub_waits_and_says_so_once(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    cmd = Command(
        "sync", "--hub", dead, "--topic", "t", "--dest", str(tmp_path / "m"),
        "--interval", "0.1", "--push-retry", "0.1",
    )  # fmt: skip
    assert await watch_then_interrupt(cmd, "waiting for it") == 130
    lines = stderr_lines(cmd)
    assert sum("Cannot connect" in line for line in lines) == 1, lines
    assert lines[-1].startswith("rshub sync: summary:")
    assert len(lines) == 2, lines


@pytest.mark.parametrize("via", ["ws", "sse", "poll", "webhook"])
async def test_a_topic_not_published_to_yet_is_said_once_then_followed(hub: Hub, via: str) -> None:
    cmd = Command(
        "subscribe", "--hub", hub.url, "--topic", "fresh", "--via", via, "--limit", "1",
        "--interval", "0.1",
    )  # fmt: skip
    await cmd.start()
    try:
        await wait_for(lambda: "no changes yet" in cmd.stderr or not running(cmd))
        assert cmd.proc is not None and cmd.proc.returncode is None, cmd.stderr
        if via == "webhook":  # subscribed (verified) before the first publish

            async def subscribed() -> bool:
                async with hub.session.get(f"{hub.url}/topics/fresh/subscriptions") as resp:
                    return bool(resp.status == 200 and (await resp.json())["subscriptions"])

            await wait_for(subscribed, 20)
        resp = await hub.publish("fresh", notification([{"loc": "http://e.org/first"}]))
        assert resp.status == 202
        assert await cmd.wait(20) == 0, cmd.stderr
    finally:
        await cmd.stop()
    [change] = [json.loads(line) for line in cmd.lines]
    assert change["loc"] == "http://e.org/first" and change["topic"] == "fresh"
    [line] = stderr_lines(cmd)
    assert "topic 'fresh' has no changes yet" in line and "waiting for its first publish" in line


async def test_sync_of_a_topic_not_published_to_yet_waits_for_its_first_publish(
    hub: Hub, tmp_path: Path
) -> None:
    cmd = Command(
        "sync", "--hub", hub.url, "--topic", "fresh", "--dest", str(tmp_path),
        "--interval", "0.1",
    )  # fmt: skip
    await cmd.start()
    try:
        await wait_for(lambda: "no changes yet" in cmd.stderr or not running(cmd))
        assert running(cmd), cmd.stderr
        loc = f"{hub.url}/healthz"  # a resource that answers
        resp = await hub.publish("fresh", notification([{"loc": loc}]))
        assert resp.status == 202
        await wait_for(lambda: "baseline:" in cmd.stderr or not running(cmd), 20)
        _elapsed, code = await cmd.interrupt()
    finally:
        await cmd.stop()
    assert code == 130, cmd.stderr
    assert "fetched 1" in cmd.stderr, cmd.stderr
    lines = stderr_lines(cmd)
    assert sum("no changes yet" in line for line in lines) == 1, lines
    assert "Capability Lists" not in cmd.stderr


@pytest.mark.parametrize("hub_settings", [{"allow_private_callbacks": False}])
async def test_a_refused_webhook_subscribe_is_one_line(hub: Hub) -> None:
    cmd = Command(
        "subscribe", "--hub", hub.url, "--topic", "t", "--via", "webhook", "--no-fallback"
    )
    code, _ = await finished(cmd)
    assert code == 2, cmd.stderr
    lines = [line for line in stderr_lines(cmd) if "no changes yet" not in line]
    assert len(lines) == 1, lines  # no "unsubscribe failed" for what was never subscribed
    assert "HTTP 400" in lines[0] and "loopback" in lines[0]


async def test_sync_says_each_failed_fetch_once(hub: Hub, tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    locs = [f"{dead}/r{i}" for i in range(4)]
    resp = await hub.publish("t", notification([{"loc": loc} for loc in locs]))
    assert resp.status == 202
    cmd = Command("sync", "--hub", hub.url, "--topic", "t", "--dest", str(tmp_path), "--once")
    code, _ = await finished(cmd, 40)
    assert code == 1, cmd.stderr  # failed fetches
    for loc in locs:
        assert sum(loc in line for line in stderr_lines(cmd)) == 1, cmd.stderr


@asynccontextmanager
async def stalling_source() -> AsyncIterator[tuple[str, list[str]]]:
    """A Source that never answers (until the test ends); yields its URL and its requests."""
    seen: list[str] = []
    release = asyncio.Event()

    async def stall(request: web.Request) -> web.Response:
        seen.append(request.path)
        await release.wait()
        return web.Response(text="late")

    app = web.Application()
    app.router.add_get("/{name}", stall)
    async with serve(app) as base:
        try:
            yield base, seen
        finally:
            release.set()


async def test_sync_interrupted_with_fetches_queued_leaks_no_warning(
    hub: Hub, tmp_path: Path
) -> None:
    async with stalling_source() as (base, seen):
        resp = await hub.publish("t", notification([{"loc": f"{base}/r{i}"} for i in range(50)]))
        assert resp.status == 202
        cmd = Command(
            "sync", "--hub", hub.url, "--topic", "t", "--dest", str(tmp_path), "--concurrency", "2"
        )
        await cmd.start()
        try:
            await wait_for(lambda: len(seen) >= 2 or not running(cmd), 20)
            _elapsed, code = await cmd.interrupt()
        finally:
            await cmd.stop()
    assert code == 130, cmd.stderr
    assert "never awaited" not in cmd.stderr and "Traceback" not in cmd.stderr, cmd.stderr


async def test_wikipedia_keeps_a_position_per_topic(
    hub: Hub, redis_url: str, tmp_path: Path
) -> None:
    state = tmp_path / "wikipedia.state.json"
    base = ["wikipedia", "--hub", hub.url, "--replay", "sample", "--state", str(state)]
    first = Command(*base, "--topic", "a", "--limit", "40")
    assert (await finished(first, 60))[0] == 0, first.stderr
    a = await stored_events(redis_url, "a")
    assert a
    # The same feed to another topic (other filters, say): from the start, not resumed.
    second = Command(*base, "--topic", "b", "--limit", "40")
    assert (await finished(second, 60))[0] == 0, second.stderr
    b = await stored_events(redis_url, "b")
    assert [e["loc"] for e in b] == [e["loc"] for e in a]
    # The same feed to the same topic again resumes after what it published.
    third = Command(*base, "--topic", "b", "--limit", "40")
    assert (await finished(third, 60))[0] == 0, third.stderr
    again = await stored_events(redis_url, "b")
    assert len(again) > len(b) and not {e["loc"] for e in again[len(b) :]} <= {e["loc"] for e in b}


async def test_sync_says_once_that_a_loc_host_cannot_be_looked_up(hub: Hub, tmp_path: Path) -> None:
    """A Source's loc whose host the resolver's IDNA step refuses is one failed fetch, said
    once, like any other (its UnicodeError is not a lookup's OSError)."""
    good = f"http://127.0.0.1:{free_port()}/r"
    bad = ["http://" + "a" * 64 + ".invalid/r", "http://r..invalid/r"]
    resp = await hub.publish("t", notification([{"loc": loc} for loc in [*bad, good]]))
    assert resp.status == 202
    cmd = Command("sync", "--hub", hub.url, "--topic", "t", "--dest", str(tmp_path), "--once")
    code, _ = await finished(cmd, 40)
    assert code == 1, cmd.stderr  # failed fetches, no crash
    assert "Traceback" not in cmd.stderr, cmd.stderr
    for loc in [*bad, good]:
        assert sum(loc in line for line in stderr_lines(cmd)) == 1, cmd.stderr


#: Number flags out of their range: each a traceback, a hang (--concurrency 0) or a poll loop
#: with no pause (--interval -1, nan), before.
BAD_NUMBERS = [
    ("sync", ["--concurrency", "0"]),
    ("sync", ["--interval", "-1"]),
    ("sync", ["--interval", "nan"]),
    ("sync", ["--overlap", "inf"]),
    ("sync", ["--resourcelist-interval", "0"]),
    ("subscribe", ["--limit", "0"]),
    ("subscribe", ["--push-retry", "-5"]),
    ("publish", ["--batch-size", "0"]),
    ("publish", ["--length", "-3"]),
    ("publish", ["--retry-for", "nan"]),
    ("wikipedia", ["--limit", "-1"]),
    ("wikipedia", ["--rate", "-2"]),
    ("bridge", ["--interval", "0"]),
]


@pytest.mark.parametrize(
    "command,bad", BAD_NUMBERS, ids=[f"{c}{''.join(b)}" for c, b in BAD_NUMBERS]
)
async def test_a_number_out_of_range_is_a_usage_error_naming_it(
    command: str, bad: list[str], tmp_path: Path
) -> None:
    flags = [f.format(tmp=tmp_path) for f in COMMANDS[command]]
    cmd = Command(command, "--hub", f"http://127.0.0.1:{free_port()}", *flags, *bad)
    code, elapsed = await finished(cmd)
    assert code == 2, cmd.stderr
    assert f"argument {bad[0]}: {bad[1]!r}" in cmd.stderr, cmd.stderr
    assert "Traceback" not in cmd.stderr
    assert elapsed < 5 * TIME_SCALE  # refused before any connection or wait
    assert empty(tmp_path)


async def test_a_bad_number_from_the_environment_is_a_usage_error(tmp_path: Path) -> None:
    cmd = Command("sync", "--hub", f"http://127.0.0.1:{free_port()}", "--topic", "t",
                  "--dest", str(tmp_path / "m"), env={"RSHUB_INTERVAL": "soon"})  # fmt: skip
    code, _ = await finished(cmd)
    assert code == 2 and "argument --interval: 'soon' is not a number" in cmd.stderr, cmd.stderr


@pytest.mark.parametrize("dest", ["file", "file/below"])
async def test_a_dest_that_cannot_be_a_directory_is_a_usage_error(
    tmp_path: Path, dest: str
) -> None:
    (tmp_path / "file").write_bytes(b"x")
    target = tmp_path / dest
    cmd = Command("sync", "--hub", f"http://127.0.0.1:{free_port()}", "--topic", "t",
                  "--dest", str(target), "--once")  # fmt: skip
    code, _ = await finished(cmd)
    assert code == 2, cmd.stderr
    [line] = stderr_lines(cmd)
    assert line.startswith(f"rshub sync: --dest {str(target)!r} cannot be the mirror directory")


#: A position file another hand or a crash of the disk left: each one line and exit 1
#: (``subscribe --state`` was a traceback), never a start from nowhere.
CORRUPT_STATES = ["{not json", "", "[]", '"text"', '{"version": 99}', '{"feeds": 5}',
                  '{"version": 1, "event_id": 5}', '{"version": 1, "recent": 5}',
                  '{"version": 1, "watermark": "soon"}']  # fmt: skip


@pytest.mark.parametrize("content", CORRUPT_STATES)
@pytest.mark.parametrize("command", ["subscribe", "sync"])
async def test_a_corrupt_position_file_is_one_line_naming_it(
    command: str, content: str, tmp_path: Path
) -> None:
    if command == "sync":
        state = tmp_path / "m" / ".rshub" / "state.json"
        flags = ["--dest", str(tmp_path / "m"), "--once"]
    else:
        state = tmp_path / "state.json"
        flags = ["--state", str(state)]
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(content)
    hub = f"http://127.0.0.1:{free_port()}"
    cmd = Command(command, "--hub", hub, "--topic", "t", *flags)
    code, _ = await finished(cmd)
    assert code == 1, cmd.stderr
    [line] = stderr_lines(cmd)
    assert line.startswith(f"rshub {command}: {state}: corrupt position file"), line
    assert state.read_text() == content  # left as it was, for its owner to look at


async def test_wikipedia_with_a_stream_host_no_lookup_takes_is_a_usage_error(
    tmp_path: Path,
) -> None:
    stream = f"http://{'a' * 64}.invalid/v2/stream/recentchange"
    cmd = Command("wikipedia", "--hub", f"http://127.0.0.1:{free_port()}", "--topic", "t",
                  "--stream", stream, "--state", str(tmp_path / "w.json"))  # fmt: skip
    code, _ = await finished(cmd)
    assert code == 2, cmd.stderr
    [line] = stderr_lines(cmd)
    assert line.startswith(f"rshub wikipedia: --stream {stream!r}: its host is not a valid"), line


@pytest.mark.parametrize("topic", ["a/b", "a b", "_a", "a" * 129])
@pytest.mark.parametrize("command", sorted(COMMANDS))
async def test_an_invalid_topic_name_is_a_usage_error_naming_the_rule(
    hub: Hub, command: str, topic: str, tmp_path: Path
) -> None:
    # Against a real hub: a name with "/" reached no route there, and its 404 said nothing.
    flags = [f.format(tmp=tmp_path) for f in COMMANDS[command]]
    flags[flags.index("--topic") + 1] = topic
    cmd = Command(command, "--hub", hub.url, *flags)
    code, _ = await finished(cmd)
    assert code == 2, cmd.stderr
    lines = stderr_lines(cmd)
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"rshub {command}: --topic: invalid topic name "), line
    assert "[A-Za-z0-9][A-Za-z0-9._-]{0,127}" in line and "404" not in line
    assert empty(tmp_path)


class _NotAHub(http.server.SimpleHTTPRequestHandler):
    """``python -m http.server``, what a newcomer's --hub pointed at: POST is 501 (no
    ``do_POST``), or 404 when the class says so; every request counted."""

    posts: ClassVar[list[str]] = []
    missing = False

    def do_POST(self) -> None:
        type(self).posts.append(self.path)
        if self.missing:
            self.send_error(404)
        else:
            self.send_error(501, "Unsupported method ('POST')")

    def log_message(self, format: str, *args: Any) -> None:  # quiet in the test's output
        pass


@pytest.mark.parametrize("status", [501, 404])
async def test_a_server_that_is_no_hub_is_said_in_one_line_without_retries(
    status: int, tmp_path: Path
) -> None:
    handler = type("Handler", (_NotAHub,), {"posts": [], "missing": status == 404})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        cmd = Command("publish", "--hub", url, "--topic", "t", "--loc", "http://e.org/a")
        code, _ = await finished(cmd)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert code == 1, cmd.stderr
    lines = stderr_lines(cmd)
    assert len(lines) == 1, lines  # the page's HTML was dumped, 11 lines, before
    assert f"HTTP {status}" in lines[0] and "text/html" in lines[0], lines
    assert "<" not in lines[0] and "is --hub the hub's base URL?" in lines[0], lines
    assert handler.posts == ["/topics/t"]  # not retried: no retry makes it a hub


async def test_sync_once_to_a_hub_that_is_down_says_it_cannot_reach_it(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    cmd = Command("sync", "--hub", dead, "--topic", "t", "--dest", str(tmp_path / "m"), "--once")
    code, _ = await finished(cmd)
    assert code == 1, cmd.stderr
    assert "waiting for it" not in cmd.stderr  # it said so, then ended, before
    last = stderr_lines(cmd)[-1]
    assert last.startswith(f"rshub sync: cannot reach the hub at {dead}: "), cmd.stderr
    assert "Cannot connect" in last  # the reason
