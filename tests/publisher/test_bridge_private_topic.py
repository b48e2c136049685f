"""``rshub bridge`` reads a Source on its own hub with ``--token``, and no other Source.

A topic bridged into another of the same hub is a private topic's documents read by the
publisher: they need the token (a token that may publish may read). It was never sent:
the bridge's first poll answered the hub's 401. A Source elsewhere must not receive it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from aiohttp import web

from rshub.cli import main
from tests.commands import Command
from tests.conftest import Hub
from tests.publisher.helpers import serve
from tests.support import changes, notification

TOKEN = "pub-3c2b1a09f8e7"


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"tokens": [TOKEN], "topic_read_tokens": {"priv": ["reader"]}}


async def test_a_bridge_reads_a_private_topic_of_its_own_hub(hub: Hub) -> None:
    resp = await hub.publish("priv", notification(changes(3)), Authorization=f"Bearer {TOKEN}")
    assert resp.status == 202
    source = f"{hub.url}/topics/priv/changelist.xml"
    argv = ["bridge", "--once", "--source", source, "--hub", hub.url, "--topic", "copy"]
    cmd = await Command(*argv, "--token", TOKEN, "--state", "", "--no-progress").start()
    try:
        code = await cmd.wait(30)
    finally:
        await cmd.stop()
    assert code == 0, cmd.stderr
    async with hub.session.get(
        f"{hub.url}/topics/copy/resourcelist.xml", headers={"Authorization": f"Bearer {TOKEN}"}
    ) as got:
        listed = await got.text()
    assert all(f"http://example.org/r{i}" in listed for i in range(3)), listed
    assert TOKEN not in cmd.stderr


async def test_a_source_elsewhere_never_gets_the_token(hub: Hub) -> None:
    seen: list[str | None] = []

    async def refuse(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        # As a server that quotes what it was sent back: a leak to be masked.
        body = orjson.dumps({"error": f"no ({request.headers.get('Authorization')})"})
        return web.Response(status=401, body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/{path:.*}", refuse)
    async with serve(app) as elsewhere:
        argv = ["bridge", "--once", "--source", f"{elsewhere}/changelist.xml", "--state", ""]
        argv += ["--hub", hub.url, "--topic", "copy", "--token", TOKEN, "--no-progress"]
        code = await asyncio.to_thread(main, argv)
    assert code == 1
    assert seen == [None]
