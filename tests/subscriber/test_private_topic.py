"""A private topic through our own clients: ``--token`` goes with every read of the hub.

``--token`` was sent by ``--via ws`` and ``sse`` only: the Capability List, the Resource
List, the Change Lists, the ``since`` check of ``--via poll`` and the WebSub subscription
were read without it, so ``rshub sync --topic priv --token r1`` answered the hub's 401
("reading it needs 'Authorization: Bearer <token>'") though a token was given. Here a hub
with a read token for ``priv`` is followed through a whole ``sync`` life (baseline, push,
polling, audit, repair) and by every ``subscribe --via``; the mirror equals the Source
after each step, and the token never appears in what the commands say.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest
from aiohttp import web

from rshub.cli import main
from tests.commands import Command
from tests.conftest import Hub
from tests.publisher.helpers import serve
from tests.support import notification, wait_for

from .helpers import expected_files, mirror_files
from .source import TestSource

pytestmark = pytest.mark.timeout(120)

#: Distinctive, so that a leak is found by looking for it in the commands' output.
READ = "r1-8d1f0c3e5a7b9264"
PUBLISH = {"Authorization": "Bearer pub-0f9e8d7c"}


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"tokens": ["pub-0f9e8d7c"], "topic_read_tokens": {"priv": [READ]}}


@pytest.fixture
async def source() -> AsyncIterator[TestSource]:
    src = TestSource()
    await src.start()
    yield src
    await src.stop()


async def publish(hub: Hub, changes: list[dict[str, Any]]) -> list[str]:
    resp = await hub.publish("priv", notification(changes), **PUBLISH)
    assert resp.status == 202, await resp.text()
    return list(orjson.loads(await resp.read())["ids"])


class Run:
    """Every command of one test, so that each one's output is checked for the token."""

    def __init__(self) -> None:
        self.commands: list[Command] = []

    async def start(self, *argv: str) -> Command:
        cmd = await Command(*argv).start()
        self.commands.append(cmd)
        return cmd

    async def done(self, *argv: str) -> Command:
        cmd = await self.start(*argv)
        await cmd.wait(30)
        return cmd

    def said(self) -> str:
        return "".join(c.stderr + c.out.decode(errors="replace") for c in self.commands)

    async def stop(self) -> None:
        for cmd in self.commands:
            await cmd.stop()


async def test_a_private_topic_syncs_through_a_whole_life(
    hub: Hub, source: TestSource, tmp_path: Path
) -> None:
    dest = tmp_path / "mirror"
    argv = ["sync", "--dest", str(dest), "--hub", hub.url, "--topic", "priv", "--token", READ]
    argv += ["--interval", "0.2", "--no-progress", "-v"]
    run = Run()

    def converged() -> bool:
        return mirror_files(dest) == expected_files(source.url, source.files)

    try:
        await publish(hub, [source.put(f"f{i}", f"first {i}".encode()) for i in range(4)])
        once = await run.done(*argv, "--once")
        assert once.proc is not None and once.proc.returncode == 0, once.stderr
        assert converged(), once.stderr  # the baseline, from the private Resource List

        pushed = await run.start(*argv, "--via", "ws")
        await wait_for(lambda: "now push" in pushed.stderr, 20)
        await publish(hub, [source.put("f0", b"second 0"), source.delete("f1")])
        await publish(hub, [source.put("new", b"created while pushed")])
        await wait_for(converged, 20)
        assert (await pushed.interrupt())[1] == 130, pushed.stderr
        assert "switching to poll" not in pushed.stderr, pushed.stderr  # push all along

        polled = await run.start(*argv, "--via", "poll")
        await wait_for(lambda: "now poll" in polled.stderr, 20)
        await publish(hub, [source.put("f2", b"second 2"), source.delete("f3")])
        await publish(hub, [source.put("late", b"created while polled")])
        await wait_for(converged, 20)
        assert (await polled.interrupt())[1] == 130, polled.stderr

        held = dest / next(iter(expected_files(source.url, {"f0": b""})))
        held.write_bytes(b"tampered")
        audit = await run.done(*argv, "--audit")
        assert audit.proc is not None and audit.proc.returncode == 1, audit.stderr
        [line] = audit.lines  # same length, other bytes: the hash tells
        assert line.startswith(f"different {source.loc('f0')}: md5 "), audit.lines
        repair = await run.done(*argv, "--audit", "--repair")
        assert repair.proc is not None and repair.proc.returncode == 0, repair.stderr
        assert converged()
        again = await run.done(*argv, "--audit")
        assert again.proc is not None and again.proc.returncode == 0, again.stderr
    finally:
        await run.stop()
    assert READ not in run.said()


@pytest.mark.parametrize("via", ["sse", "webhook", "poll"])
async def test_every_subscribe_transport_reads_a_private_topic(hub: Hub, via: str) -> None:
    first, *rest = await publish(
        hub, [{"loc": f"http://e.org/{i}", "change": "created"} for i in range(3)]
    )
    argv = ["subscribe", "--hub", hub.url, "--topic", "priv", "--token", READ, "--via", via]
    argv += ["--since", first, "--limit", "2", "--interval", "0.2", "--no-fallback", "-v"]
    cmd = await Command(*argv).start()
    try:
        code = await cmd.wait(30)
    finally:
        await cmd.stop()
    assert code == 0, cmd.stderr
    assert [orjson.loads(line)["id"] for line in cmd.lines] == rest
    assert READ not in cmd.stderr


async def test_without_its_token_a_private_topic_is_refused_once_and_clearly(
    hub: Hub, tmp_path: Path
) -> None:
    await publish(hub, [{"loc": "http://e.org/a"}])
    for token, status in (([], "HTTP 401"), (["--token", "not-a-reader-5e4d"], "HTTP 403")):
        argv = ["--dest", str(tmp_path / "m"), "--hub", hub.url, "--topic", "priv", *token]
        cmd = await Command("sync", *argv).start()
        try:
            code = await cmd.wait(30)
        finally:
            await cmd.stop()
        assert code == 2, cmd.stderr
        [refused] = [line for line in cmd.stderr.splitlines() if "refused" in line]
        assert status in refused, cmd.stderr
        assert "not-a-reader-5e4d" not in cmd.stderr


#: Tokens quoted back by the server below; the second has characters that URLs, JSON and
#: repr() escape, and a ``*`` (then shown as another mask).
ECHOED = ["tok-6f1e2d3c4b5a", 'tk-"q\\%/*x']


def echoing_hub(token: str) -> web.Application:
    """A server taken for the hub that quotes the token back, in every form it can."""
    forms = [token, quote(token, safe=""), json.dumps(token)[1:-1], repr(token)]

    async def documents(request: web.Request) -> web.Response:
        if request.query.get("as") == "text":  # not the hub's JSON: its body is quoted
            return web.Response(status=401, text=" ".join(forms))
        return web.json_response({"error": f"token {forms} refused"}, status=401)

    async def ws(request: web.Request) -> web.WebSocketResponse:
        socket = web.WebSocketResponse()
        await socket.prepare(request)
        await socket.close(code=4000, message=token.encode())
        return socket

    app = web.Application()
    app.router.add_get("/topics/t/capabilitylist.xml", documents)
    app.router.add_get("/topics/t/ws", ws)
    return app


@pytest.mark.parametrize("token", ECHOED, ids=["plain", "escaped"])
async def test_a_server_that_quotes_the_token_back_never_gets_it_shown(
    tmp_path: Path, token: str
) -> None:
    async with serve(echoing_hub(token)) as base:
        argv = ["--hub", base, "--topic", "t", "--token", token, "-v"]
        said = []
        for extra in ([], ["--source", f"{base}/topics/t/capabilitylist.xml?as=text"]):
            cmd = Command("sync", "--once", "--dest", str(tmp_path / "m"), *argv, *extra)
            await cmd.start()
            try:
                assert await cmd.wait(30) == 2, cmd.stderr
            finally:
                await cmd.stop()
            said.append(cmd.stderr)
        pushed = await Command("subscribe", "--via", "ws", "--no-fallback", *argv).start()
        try:
            await wait_for(lambda: "push lost" in pushed.stderr, 20)
            await pushed.interrupt()
        finally:
            await pushed.stop()
        said.append(pushed.stderr)
    for text in said:
        assert "refused" in text or "4000" in text, text  # what the server said is shown
        for form in (token, quote(token, safe=""), json.dumps(token)[1:-1]):
            assert form not in text, text


@pytest.mark.parametrize("command", ["sync", "subscribe", "publish", "bridge"])
@pytest.mark.parametrize(
    "token,why", [("a\nb", "U+000A"), ("two words", "a space"), ("tök", "U+00F6")]
)
def test_a_token_that_cannot_travel_in_a_header_is_bad_usage(
    command: str, token: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A newline in it made aiohttp refuse the header with a traceback, after the
    command had started; now it is said at once, without quoting it."""
    argv = {
        "sync": ["sync", "--dest", "m", "--topic", "t"],
        "subscribe": ["subscribe", "--topic", "t"],
        "publish": ["publish", "--topic", "t", "--loc", "http://e.org/a"],
        "bridge": ["bridge", "--topic", "t", "--source", "http://s.invalid/"],
    }[command]
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--token", token])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --token: only visible ASCII characters (RFC 6750), not {why}" in err
    assert token not in err
