"""Real answers of a real hub against the OpenAPI document it serves.

A hub on 127.0.0.1 (the ``hub`` fixture, on the session's Redis) is driven through each
JSON-answering route with a real subscription (a callback server on 127.0.0.1), and each
JSON body is validated against the schema the document gives for that operation and
status. The document is generated from the same models the handlers build these bodies
from; this shows the served JSON and the document agree, field by field (the models forbid
fields they do not list). The refusals every route shares (an unknown ``Expect``: 417; one
that cannot be read: 400) are checked on routes of each kind.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import jsonschema_rs
import pytest

from hub.core import openapi
from hub.core.placement import subscription_id
from tests.conftest import Hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_websub import subscribe
from tests.support import changes, notification, wait_for

JSON = "application/json"


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    """Retries within half a second, so that a failing delivery is soon a dead letter."""
    return {
        "retry_base_seconds": 0.02,
        "retry_max_seconds": 0.1,
        "retry_window_seconds": 0.5,
        "delivery_batch_max_changes": 1,
    }


@pytest.fixture
async def callback() -> AsyncIterator[CallbackServer]:
    server = await CallbackServer().start()
    yield server
    await server.stop()


class Document:
    """The hub's served document, and a check of one answer against it."""

    def __init__(self, served: dict[str, Any]) -> None:
        self.served = served
        self.checked: set[tuple[str, str, int]] = set()

    def check(self, method: str, path: str, status: int, body: Any) -> None:
        answers = self.served["paths"][path][method]["responses"]
        assert str(status) in answers, f"{method} {path}: {status} is not documented"
        content = answers[str(status)].get("content", {})
        assert JSON in content, f"{method} {path}: {status} has no JSON body documented"
        schema = {**content[JSON]["schema"], "components": self.served["components"]}
        jsonschema_rs.Draft202012Validator(schema).validate(body)
        self.checked.add((method, path, status))


async def _call(
    hub: Hub,
    document: Document,
    method: str,
    route: str,
    status: int,
    url: str | None = None,
    **kwargs: Any,
) -> Any:
    """``method`` on ``url`` (by default the route's own path): ``status``, and its JSON
    body valid for the route's documented answer."""
    async with hub.session.request(method, hub.url + (url or route), **kwargs) as resp:
        text = await resp.text()
        assert resp.status == status, (method, url or route, resp.status, text)
        assert resp.content_type == JSON, (method, url or route, resp.content_type)
    body = json.loads(text)
    document.check(method.lower(), route, status, body)
    return body


async def test_every_json_answer_matches_the_served_document(
    hub: Hub, callback: CallbackServer
) -> None:
    async with hub.session.get(f"{hub.url}/openapi.json") as resp:
        assert resp.status == 200
        document = Document(await resp.json())
    document.check("get", "/openapi.json", 200, document.served)

    call = _call
    published = await call(
        hub,
        document,
        "POST",
        "/topics/{name}",
        202,
        "/topics/t",
        data=notification(changes(3)),
        headers={"Content-Type": "application/xml", "Idempotency-Key": "k1"},
    )
    assert published["accepted"] == 3 and published["replayed"] is False
    again = await call(
        hub,
        document,
        "POST",
        "/topics/{name}",
        202,
        "/topics/t",
        data=notification(changes(3)),
        headers={"Content-Type": "application/xml", "Idempotency-Key": "k1"},
    )
    assert again["replayed"] is True and again["ids"] == published["ids"]
    await call(
        hub, document, "POST", "/topics/{name}", 400, "/topics/t", data=b"<not-xml", headers={}
    )
    by_link = await call(
        hub,
        document,
        "POST",
        "/",
        202,
        data=notification(changes(1, start=10)),
        headers={"Content-Type": "application/xml", "Link": f'<{hub.url}/topics/t>; rel="self"'},
    )
    assert by_link["topic"] == "t" and len(by_link["ids"]) == 1
    await subscribe(hub, callback)
    sub_id = subscription_id("t", callback.url)
    health = await call(hub, document, "GET", "/healthz", 200)
    assert health["status"] == "ok" and health["redis"] == "ok"  # a loopback client: details

    listed = await call(
        hub, document, "GET", "/topics/{name}/subscriptions", 200, "/topics/t/subscriptions"
    )
    assert [s["callback"] for s in listed["subscriptions"]] == [callback.url]
    overview = await call(hub, document, "GET", "/admin/overview.json", 200)
    assert [t["name"] for t in overview["topics"]] == ["t"]
    await call(hub, document, "GET", "/admin/topics", 200)
    topic = await call(hub, document, "GET", "/admin/topics/{name}", 200, "/admin/topics/t")
    assert topic["name"] == "t" and topic["presence"]["websub"]["active"] == 1
    await call(hub, document, "GET", "/admin/topics/{name}", 404, "/admin/topics/nothing")
    rows = await call(hub, document, "GET", "/admin/subscriptions", 200)
    assert [r["id"] for r in rows["subscriptions"]] == [sub_id]
    await call(hub, document, "GET", "/admin/subscriptions", 400, "/admin/subscriptions?state=x")

    one = f"/admin/subscriptions/{sub_id}"
    record = await call(hub, document, "GET", "/admin/subscriptions/{id}", 200, one)
    assert record["id"] == sub_id and isinstance(record["attempts"], list)
    await call(hub, document, "GET", "/admin/subscriptions/{id}", 400, "/admin/subscriptions/x")
    limits = "/admin/subscriptions/{id}/rate-limit"
    await call(hub, document, "GET", limits, 200, f"{one}/rate-limit")
    put = await call(
        hub, document, "PUT", limits, 200, f"{one}/rate-limit", json={"per_second": 2, "burst": 3}
    )
    assert put["source"] == "admin" and put["burst"] == 3
    await call(hub, document, "PUT", limits, 400, f"{one}/rate-limit", json={"burst": 3})
    await call(hub, document, "DELETE", limits, 200, f"{one}/rate-limit")
    letters = "/admin/subscriptions/{id}/dead-letters"
    listed_letters = await call(hub, document, "GET", letters, 200, f"{one}/dead-letters")
    assert listed_letters["total"] == 0
    await call(hub, document, "GET", letters, 400, f"{one}/dead-letters?limit=0")
    replay = letters + "/replay"
    replayed = await call(hub, document, "POST", replay, 200, f"{one}/dead-letters/replay")
    assert replayed["replayed"] == 0 and replayed["error"] is None

    target = {"topic": "t", "callback": callback.url}
    resumed = await call(hub, document, "POST", "/admin/subscriptions/resume", 200, json=target)
    assert resumed["state"] == "active" and resumed["secret"] is False

    revocations = "/admin/revocations"
    revoke = {"fingerprint": "ab" * 32, "topic": "t"}
    revoked = await call(hub, document, "POST", revocations, 200, json=revoke)
    assert revoked["new"] is True and revoked["fingerprint"] == "ab" * 32
    again_revoked = await call(hub, document, "POST", revocations, 200, json=revoke)
    assert again_revoked["new"] is False
    in_force = await call(hub, document, "GET", revocations, 200)
    assert len(in_force["revocations"]) == 1
    lifted = await call(hub, document, "DELETE", revocations, 200, json=revoke)
    assert lifted["lifted"] is True
    await call(hub, document, "DELETE", revocations, 404, json=revoke)
    await call(hub, document, "POST", revocations, 400, json={"topik": "t"})

    deleted = await call(hub, document, "DELETE", "/admin/subscriptions", 200, json=target)
    assert deleted["deleted"] is True
    await call(hub, document, "DELETE", "/admin/subscriptions", 404, json=target)
    await call(
        hub,
        document,
        "DELETE",
        "/admin/subscriptions",
        415,
        data="x",
        headers={"Content-Type": "text/plain"},
    )
    gone = await call(hub, document, "DELETE", "/admin/topics/{name}", 200, "/admin/topics/t")
    assert gone["deleted"] is True and gone["keys"] > 0
    # The documents' and streams' refusals are JSON too.
    await call(
        hub, document, "GET", "/topics/{name}/changelist.xml", 400, "/topics/%20/changelist.xml"
    )
    await call(hub, document, "GET", "/topics/{name}/events", 400, "/topics/t/events?since=x")
    await call(hub, document, "GET", "/dashboard/{file}", 404, "/dashboard/nothing.js")
    # Every operation documented with a JSON success answered one, checked.
    succeeding = {
        (method, path)
        for method, path, op in openapi.operations(document.served)
        for status, answer in op["responses"].items()
        if status.startswith("2") and JSON in answer.get("content", {})
    }
    assert succeeding - {(m, p) for m, p, status in document.checked if status < 300} == set()


async def test_a_failing_subscription_s_records_match_the_served_document(hub: Hub) -> None:
    """Dead letters, failed attempts, a last error: the fields an idle subscription leaves
    empty, filled."""
    document = Document(openapi.spec(hub.url + "/"))
    refusing = await CallbackServer(statuses=[500] * 1000).start()
    try:
        await subscribe(hub, refusing)
        sub_id = subscription_id("t", refusing.url)
        resp = await hub.publish("t", notification(changes(2)))
        assert resp.status == 202
        letters = f"/admin/subscriptions/{sub_id}/dead-letters"

        async def dead_lettered() -> bool:
            async with hub.session.get(hub.url + letters) as resp:
                return bool((await resp.json())["total"])

        await wait_for(dead_lettered, timeout=20)
        route = "/admin/subscriptions/{id}/dead-letters"
        listed = await _call(hub, document, "GET", route, 200, letters)
        assert listed["dead_letters"][0]["error"] == "HTTP 500"
        one = f"/admin/subscriptions/{sub_id}"
        record = await _call(hub, document, "GET", "/admin/subscriptions/{id}", 200, one)
        assert record["attempts"] and record["attempts"][0]["status"] == 500
        assert record["last_error"]
        rows = await _call(hub, document, "GET", "/admin/subscriptions", 200)
        assert rows["subscriptions"][0]["failures"] > 0
        await _call(hub, document, "GET", "/admin/overview.json", 200)
        await _call(
            hub, document, "GET", "/topics/{name}/subscriptions", 200, "/topics/t/subscriptions"
        )
        replayed = await _call(hub, document, "POST", route + "/replay", 200, letters + "/replay")
        assert replayed["error"] == "HTTP 500" and replayed["remaining"] > 0
    finally:
        await refusing.stop()


@pytest.mark.parametrize(
    ("method", "route", "url"),
    [
        ("GET", "/healthz", "/healthz"),
        ("POST", "/topics/{name}", "/topics/t"),
        ("GET", "/topics/{name}/changelist.xml", "/topics/t/changelist.xml"),
        ("GET", "/topics/{name}/events", "/topics/t/events"),
        ("GET", "/admin/topics", "/admin/topics"),
        ("GET", "/openapi.json", "/openapi.json"),
    ],
)
async def test_an_unknown_expectation_is_the_documented_417(
    hub: Hub, method: str, route: str, url: str
) -> None:
    document = Document(openapi.spec(hub.url + "/"))
    body = await _call(
        hub,
        document,
        method,
        route,
        417,
        url,
        data=notification(changes(1)) if method == "POST" else None,
        headers={"Expect": "teleport", "Content-Type": "application/xml"},
    )
    assert "Expect" in body["error"] and body["status"] == 417


@pytest.mark.parametrize(
    ("method", "route", "url"),
    [("GET", "/healthz", "/healthz"), ("GET", "/docs", "/docs"), ("GET", "/", "/")],
)
async def test_an_unreadable_expectation_is_the_documented_400(
    hub: Hub, method: str, route: str, url: str
) -> None:
    """Bytes no client library would send, so written on a socket."""
    document = Document(openapi.spec(hub.url + "/"))
    port = hub.settings.port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"{method} {url} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode()
            + b"Expect: 100-continu\xe9\r\nConnection: close\r\n\r\n"
        )
        raw = await asyncio.wait_for(reader.read(), timeout=10)
    finally:
        writer.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert status == 400, raw[:300]
    assert b"application/json" in head.lower()
    body = json.loads(payload)
    document.check(method.lower(), route, status, body)
    assert "Expect" in body["error"]
