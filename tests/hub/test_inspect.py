"""``rshub inspect`` against a real hub: by topic and callback or by id, signed with the
subscription's secret or with the admin token, human-readable or JSON."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from hub.core.placement import subscription_id
from rshub.cli import main
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_subscription_record import attempts_logged
from tests.hub.test_websub import subscribe
from tests.publisher.helpers import serve
from tests.support import changes, notification, wait_for

SECRET = "inspect-secret"


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"admin_token": "adm", "retry_base_seconds": 0.02, "retry_max_seconds": 0.05}


@pytest.fixture
async def callback() -> AsyncIterator[CallbackServer]:
    server = await CallbackServer(statuses=[502]).start()
    yield server
    await server.stop()


async def inspect(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["inspect", *argv])
    out, err = capsys.readouterr()
    return code, out, err


async def test_inspect_prints_the_record_for_the_subscriber_and_the_admin(
    hub: Hub, callback: CallbackServer, capsys: pytest.CaptureFixture[str]
) -> None:
    await subscribe(hub, callback, **{"hub.secret": SECRET})
    ids = (await (await hub.publish("t", notification(changes(2)))).json())["ids"]
    await wait_for(lambda: callback.ids == ids)
    await attempts_logged(hub, "t", callback.url, 2, newest=204)
    sub_id = subscription_id("t", callback.url)

    by_name = ("--hub", hub.url, "--topic", "t", "--callback", callback.url)
    code, out, err = await inspect(capsys, *by_name, "--secret", SECRET)
    assert code == 0, err
    assert f"subscription {sub_id}" in out and callback.url in out
    assert f"through {ids[-1]}" in out  # the last success
    lines = out.splitlines()
    newest, oldest = lines[-2], lines[-1]
    assert " 204 " in newest and f"{ids[0]}..{ids[-1]}" in newest
    assert " 502 " in oldest and "HTTP 502" in oldest

    code, out, err = await inspect(
        capsys, "--hub", hub.url, "--id", sub_id, "--admin-token", "adm", "--json"
    )
    assert code == 0, err
    record = json.loads(out)
    assert record["id"] == sub_id and [a["status"] for a in record["attempts"]] == [204, 502]

    code, out, err = await inspect(capsys, *by_name, "--secret", "wrong")
    assert code == 1 and "403" in err and "does not match" in err and not out
    code, out, err = await inspect(capsys, *by_name)
    assert code == 1 and "401" in err and "X-RSHub-Signature" in err
    code, _, err = await inspect(capsys, "--hub", hub.url, "--topic", "t")
    assert code == 2 and "--callback" in err


@pytest.mark.parametrize(
    "body",
    [b"<html>not a hub</html>", b"[]", b'{"id": "x"}', b'{"attempts": 5}', b"null"],
    ids=["html", "list", "missing-fields", "wrong-kind", "null"],
)
@pytest.mark.parametrize("as_json", [False, True])
async def test_inspect_of_what_is_no_subscription_record_is_one_line(
    capsys: pytest.CaptureFixture[str], body: bytes, as_json: bool
) -> None:
    """Another server at --hub (or an older hub) answering 200 with something else: one
    line naming the URL and the problem, exit 1, where it was a traceback."""

    async def record(request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/admin/subscriptions/{id}", record)
    async with serve(app) as base:
        flags = ["--json"] if as_json else []
        code, out, err = await inspect(capsys, "--hub", base, "--id", "abc", *flags)
    if as_json and body != b"<html>not a hub</html>":
        assert code == 0 and json.loads(out) == json.loads(body)  # JSON is printed as it is
        return
    assert code == 1 and out == "", (out, err)
    [line] = err.splitlines()
    assert line.startswith(f"rshub inspect: {base}/admin/subscriptions/abc answered what is not")
