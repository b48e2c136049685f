"""The OpenAPI document against the real hub: every route described, every operation fuzzed.

schemathesis generates requests for every operation of ``/openapi.json`` and checks each
answer: no 5xx, a documented status, a documented content type, and a body matching its
schema. The hub is a real ``rshub serve`` process on the session's real Redis.

Safety: generated WebSub forms would make the hub call whatever ``hub.callback`` or
``hub.url`` says. Before sending, those fields are rewritten to a sink on 127.0.0.1
(keeping the generated text in its path), so the hub never calls anything else.
"""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from prometheus_client.parser import text_string_to_metric_families
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from hub.core import openapi
from hub.core.settings import Settings
from hub.store.embedded_redis import EmbeddedRedis
from hub.web.app import create_app
from tests.support import HubProcess, changes, notification

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
#: Cases per operation; ~20 operations, so a few hundred in all.
EXAMPLES = 16


class _Sink(BaseHTTPRequestHandler):
    """GET: a valid change notification (what a pinged URL serves; a verification gets it
    too and fails, as no challenge is echoed). POST: 404."""

    def do_GET(self) -> None:
        body = notification(changes(2, prefix="http://example.org/pinged"))
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def sink() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def live_hub(
    redis_server: EmbeddedRedis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HubProcess]:
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    data = tmp_path_factory.mktemp("openapi-hub")
    # A short heartbeat: the fuzzer's SSE requests hang up at once; the hub notices sooner.
    env = {"RSHUB_HEARTBEAT_SECONDS": "0.5"}
    hub = HubProcess(str(data), None, "--redis-url", redis_server.url, env=env).start()
    req = urllib.request.Request(
        f"{hub.url}/topics/demo",
        data=notification(changes(3)),
        headers={"Content-Type": "application/xml"},
    )
    urllib.request.urlopen(req, timeout=5).close()
    yield hub
    alive = hub.proc is not None and hub.proc.poll() is None
    log = hub.log()
    hub.stop()
    assert alive, f"the hub died during the fuzzing: {log}"
    assert "Traceback" not in log and "Error handling request" not in log, log


#: The document the hub serves is this one (with its own server URL; checked below).
schema = schemathesis.openapi.from_dict(openapi.spec())


def _make_safe(case: Any, hub_url: str, sink: str) -> None:
    body = case.body
    if case.path == "/" and isinstance(body, dict):
        for field in ("hub.callback", "hub.url"):
            if field in body:
                body[field] = f"{sink}/{quote(str(body[field]), safe='')[:200]}"
        if "hub.topic" in body:
            body["hub.topic"] = f"{hub_url}/topics/{quote(str(body['hub.topic']), safe='')[:60]}"


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_every_operation_answers_as_documented(case: Any, live_hub: HubProcess, sink: str) -> None:
    _make_safe(case, live_hub.url, sink)
    if case.path in ("/topics/{name}/events", "/events"):
        # An endless stream: check the status and type, then hang up.
        kwargs = case.as_transport_kwargs(base_url=live_hub.url)
        with requests.request(**kwargs, stream=True, timeout=10) as stream:
            if stream.status_code == 200:
                assert stream.headers["Content-Type"].startswith("text/event-stream")
                return
            stream.content  # an error: a short JSON body  # noqa: B018
        case.validate_response(stream, checks=CHECKS)
        return
    resp = case.call(base_url=live_hub.url, timeout=10)
    case.validate_response(resp, checks=CHECKS)


def test_the_served_document_is_the_spec(live_hub: HubProcess) -> None:
    served = requests.get(f"{live_hub.url}/openapi.json", timeout=5).json()
    assert served == openapi.spec(f"{live_hub.url}/")
    assert served["openapi"] == "3.1.0"
    page = requests.get(f"{live_hub.url}/docs", timeout=5)
    assert page.status_code == 200 and "text/html" in page.headers["Content-Type"]
    assert "/topics/{name}/subscriptions" in page.text


def test_the_hub_is_healthy_after_the_fuzzing(live_hub: HubProcess) -> None:
    resp = requests.get(f"{live_hub.url}/healthz", timeout=5)
    assert resp.status_code == 200 and resp.json()["status"] == "ok"
    # The fuzzing really happened: the hub's own metrics count the requests, by route.
    served: dict[str, float] = {}
    text = requests.get(f"{live_hub.url}/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "rshub_http_request_duration_seconds_count":
                route = sample.labels["route"]
                served[route] = served.get(route, 0) + sample.value
    print(f"requests served per route: {served}")
    assert sum(served.values()) >= 200
    for _method, path, _op in openapi.operations(openapi.spec()):
        assert served.get(path, 0) >= 1, path
    resp = requests.get(f"{live_hub.url}/topics/demo/changelist.xml", timeout=5)
    assert resp.status_code == 200


def test_every_route_is_in_the_document(tmp_path: Path) -> None:
    app = create_app(Settings(), "redis://127.0.0.1:1/0")
    document = openapi.spec()
    described = {(m.upper(), p) for m, p, _ in openapi.operations(document)}
    routes = set()
    for route in app.router.routes():
        if route.method == "HEAD":
            continue
        path = route.resource.canonical if route.resource is not None else ""
        routes.add((route.method, path.replace("{page:[^/]+}", "{page}")))
    assert routes == described


def test_docs_page_lists_every_operation() -> None:
    document = openapi.spec()
    page = openapi.render_html(document)
    for method, path, _ in openapi.operations(document):
        assert f"<code>{path}</code>" in page and method.upper() in page
    assert "<script" not in page and "http" not in page.split("<body>", 1)[0]


def test_publishing_documents_its_503s_and_the_ping_429() -> None:
    """A publish's 503 is also RSHUB_REDIS_WAIT_REPLICAS's (hub.store.replicas); a publish
    ping's 429 comes with Retry-After."""
    document = openapi.spec()
    publishing = [
        (method, path, op)
        for method, path, op in openapi.operations(document)
        if "publishing" in op.get("tags", ())
    ]
    assert {(m, p) for m, p, _ in publishing} == {("post", "/topics/{name}"), ("post", "/")}
    for _method, _path, op in publishing:
        text = op["responses"]["503"]["description"]
        for needed in ("Redis unavailable", "RSHUB_REDIS_WAIT_REPLICAS", "Idempotency-Key"):
            assert needed in text, (op["operationId"], needed)
    ping = document["paths"]["/"]["post"]["responses"]["429"]
    assert "ping" in ping["description"] and "Retry-After" in ping["headers"]
