"""A hub without tokens takes admin and state-changing requests from this machine's own
tools and its own pages only (hub.core.own_site), against a real hub and Redis.

The reported attack: on the README's hub (no tokens, loopback), ``Host: evil.example:PORT``
read ``/admin/overview.json`` and ``/admin/subscriptions`` (callback URLs with their
``?apikey=``) and deleted a topic, and a form POST with ``Origin: https://evil.example``
resumed a subscription: what a page in a browser on this machine can send through DNS
rebinding or a cross-site form. Named cases, the good names and origins that must keep
working (and a hub with tokens, and CORS origins the operator listed), and a seeded fuzz of
``Host`` / ``Origin`` / ``Sec-Fetch-Site`` values under the watchdog. The browser itself:
tests/hub/test_dns_rebinding.py.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from hub.core.settings import Settings
from tests.conftest import Hub, start_hub
from tests.hub.callback_server import CallbackServer
from tests.support import TIME_SCALE, changes, free_port, notification, wait_for
from tests.watchdog import Watchdog

PUBLIC = "https://hub.example"
ALIAS = "http://rshub.test:8080"
SECRET = "apikey=s3cr3t-in-the-callback"
EVIL = "https://evil.example"


@pytest.fixture
def site_settings() -> dict[str, Any]:
    """The README's hub (no tokens, loopback), with a public base URL and an alias."""
    return {}


@pytest.fixture
async def site_hub(redis_url: str, site_settings: dict[str, Any]) -> AsyncIterator[Hub]:
    port = free_port()
    settings = Settings(
        host="127.0.0.1",
        port=port,
        base_url=PUBLIC,
        alias_urls=[ALIAS],
        allow_private_callbacks=True,  # the callbacks here are on loopback
        retry_base_seconds=30.0,  # a failed delivery waits: only a resume brings it back
        retry_max_seconds=60.0,
        suspend_after_failures=1,
        **site_settings,
    )
    runner, app = await start_hub(settings, redis_url)
    async with aiohttp.ClientSession() as session:
        yield Hub(f"http://127.0.0.1:{port}", app, settings, session)
    await runner.cleanup()


def port_of(hub: Hub) -> int:
    return int(hub.url.rsplit(":", 1)[1])


def rebinding(hub: Hub) -> dict[str, str]:
    """The headers of a page on evil.example whose name now points at 127.0.0.1."""
    return {"Host": f"evil.example:{port_of(hub)}"}


async def ask(
    hub: Hub, method: str, path: str, headers: dict[str, str] | None = None, **kwargs: Any
) -> tuple[int, Any]:
    async with hub.session.request(method, hub.url + path, headers=headers, **kwargs) as resp:
        body = await resp.read()
        if resp.content_type == "application/json":
            return resp.status, orjson.loads(body)
        return resp.status, body.decode(errors="replace")


def refused(answer: tuple[int, Any], header: str, *context: str) -> None:
    status, body = answer
    assert status == 403, (answer, context)
    assert body.get("header") == header and header in body["error"], (body, context)
    assert "s3cr3t" not in orjson.dumps(body).decode()


async def topic_length(hub: Hub, topic: str) -> int:
    status, body = await ask(hub, "GET", f"/admin/topics/{topic}")
    return int(body["length"]) if status == 200 else 0


async def subscribed(hub: Hub, server: CallbackServer) -> None:
    """``server`` subscribed to ``t`` by the hub's own tools, its verification answered."""
    form = {"hub.mode": "subscribe", "hub.topic": f"{hub.url}/topics/t", "hub.callback": server.url}
    assert (await ask(hub, "POST", "/", data=form))[0] == 202
    await wait_for(lambda: len(server.verifications) == 1)


@pytest.fixture
async def secret_callback(site_hub: Hub) -> AsyncIterator[CallbackServer]:
    """A subscription to ``t`` whose callback URL carries a secret, and 3 changes in ``t``."""
    server = await CallbackServer().start()
    server.url += "?" + SECRET
    await subscribed(site_hub, server)
    await site_hub.publish("t", notification(changes(3)))
    await wait_for(lambda: len(server.ids) == 3)
    yield server
    await server.stop()


ADMIN_VIEWS = [
    "/admin/overview.json",
    "/admin/subscriptions",
    "/admin/topics",
    "/admin/topics/t",
    "/topics/t/subscriptions",
]


async def test_a_rebinding_host_reads_no_admin_view(
    site_hub: Hub, secret_callback: CallbackServer
) -> None:
    hub = site_hub
    status, rows = await ask(hub, "GET", "/admin/subscriptions")
    assert status == 200 and SECRET in rows["subscriptions"][0]["callback"]  # the tools' view
    record = f"/admin/subscriptions/{rows['subscriptions'][0]['id']}"
    for path in [*ADMIN_VIEWS, record, f"{record}/dead-letters", f"{record}/rate-limit"]:
        assert (await ask(hub, "GET", path))[0] == 200, path
        refused(await ask(hub, "GET", path, rebinding(hub)), "Host", path)
    # Health for anyone, its details (pid, node) only for the hub's own tools.
    status, health = await ask(hub, "GET", "/healthz", rebinding(hub))
    assert status == 200 and health["status"] == "ok" and "pid" not in health
    assert "pid" in (await ask(hub, "GET", "/healthz"))[1]


async def test_a_rebinding_host_changes_nothing(
    site_hub: Hub, secret_callback: CallbackServer
) -> None:
    hub = site_hub
    target = {"topic": f"{hub.url}/topics/t", "callback": secret_callback.url}
    refused(await ask(hub, "DELETE", "/admin/topics/t", rebinding(hub)), "Host")
    refused(await ask(hub, "DELETE", "/admin/subscriptions", rebinding(hub), json=target), "Host")
    refused(await ask(hub, "POST", "/topics/t", rebinding(hub), data=b"<x/>"), "Host")
    assert await topic_length(hub, "t") == 3
    assert len((await ask(hub, "GET", "/admin/subscriptions"))[1]["subscriptions"]) == 1
    # The machine's own tool, by the hub's own name: deleted.
    status, body = await ask(hub, "DELETE", "/admin/topics/t")
    assert status == 200 and body["deleted"] is True


async def test_a_cross_site_form_resumes_nothing(site_hub: Hub) -> None:
    hub = site_hub
    failing = await CallbackServer(statuses=[500]).start()
    try:
        await subscribed(hub, failing)
        await hub.publish("t", notification(changes(2)))

        async def state() -> str:
            rows = (await ask(hub, "GET", "/admin/subscriptions?topic=t"))[1]["subscriptions"]
            return str(rows[0]["state"]) if rows else ""

        async def suspended() -> bool:
            return await state() == "suspended"

        await wait_for(suspended)
        target = {"topic": "t", "callback": failing.url}
        resume = "/admin/subscriptions/resume"
        refused(await ask(hub, "POST", resume, {"Origin": EVIL}, data=target), "Origin")
        cross = {"Sec-Fetch-Site": "cross-site"}
        refused(await ask(hub, "POST", resume, cross, data=target), "Sec-Fetch-Site")
        null = {"Origin": "null", "Sec-Fetch-Site": "cross-site"}  # a sandboxed page
        refused(await ask(hub, "POST", resume, null, data=target), "Origin")
        assert await state() == "suspended" and failing.ids == []
        # The hub's own page (the dashboard's origin) may.
        own = {"Origin": hub.url, "Sec-Fetch-Site": "same-origin"}
        status, body = await ask(hub, "POST", resume, own, data=target)
        assert status == 200 and body["state"] == "active"
        await wait_for(lambda: len(failing.ids) == 2, timeout=5)
    finally:
        await failing.stop()


async def test_publish_and_subscribe_from_another_site_are_refused(site_hub: Hub) -> None:
    hub = site_hub
    callback = await CallbackServer().start()
    try:
        body = notification(changes(1))
        for headers, header in [
            ({"Origin": EVIL}, "Origin"),
            ({"Sec-Fetch-Site": "cross-site"}, "Sec-Fetch-Site"),
            (rebinding(hub), "Host"),
            ({"Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site"}, "Origin"),
        ]:
            refused(await ask(hub, "POST", "/topics/p", headers, data=body), header)
            self_link = {**headers, "Link": f'<{hub.url}/topics/p>; rel="self"'}
            refused(await ask(hub, "POST", "/", self_link, data=body), header)
            for mode in ("subscribe", "publish"):
                form = {"hub.mode": mode, "hub.topic": f"{hub.url}/topics/p"}
                form["hub.callback"] = callback.url
                refused(await ask(hub, "POST", "/", headers, data=form), header)
        # A plain publish the lean path would take, but under another name: aiohttp's answer.
        reader, writer = await asyncio.open_connection("127.0.0.1", port_of(hub))
        writer.write(
            f"POST /topics/p HTTP/1.1\r\nHost: evil.example:{port_of(hub)}\r\n"
            f"Content-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
        answer = await asyncio.wait_for(reader.read(), 10 * TIME_SCALE)
        writer.close()
        assert answer.startswith(b"HTTP/1.1 403") and b'"header": "Host"' in answer, answer[:300]
        assert await topic_length(hub, "p") == 0 and callback.verifications == []
    finally:
        await callback.stop()


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Host": "localhost:{port}"},
        {"Host": "127.0.0.1:{port}"},
        {"Host": "[::1]:{port}"},
        {"Host": "localhost:9000"},  # a tunnel: ssh -L 9000:localhost:{port}
        {"Host": "hub.example"},  # the public base's host
        {"Host": "rshub.test:8080"},  # an alias
        {"Host": "localhost:{port}", "Origin": "http://localhost:{port}"},
        {"Origin": "http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"},
        {"Origin": PUBLIC, "Sec-Fetch-Site": "same-origin"},
        {"Origin": ALIAS},
        {"Sec-Fetch-Site": "none"},  # typed into the address bar
    ],
)
async def test_the_hub_s_own_names_and_pages_are_taken(
    site_hub: Hub, headers: dict[str, str]
) -> None:
    hub = site_hub
    given = {k: v.format(port=port_of(hub)) for k, v in headers.items()}
    status, body = await ask(hub, "POST", "/topics/own", given, data=notification(changes(1)))
    assert status == 202, body
    assert (await ask(hub, "GET", "/admin/overview.json", given))[0] == 200
    assert (await ask(hub, "DELETE", "/admin/topics/own", given))[0] == 200


async def test_a_tool_without_a_host_header_is_taken(site_hub: Hub) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port_of(site_hub))
    writer.write(b"GET /admin/overview.json HTTP/1.0\r\n\r\n")
    answer = await asyncio.wait_for(reader.read(), 10 * TIME_SCALE)
    writer.close()
    assert answer.startswith(b"HTTP/1.0 200"), answer[:300]


class TestAHubWithTokens:
    """Where a token is checked, the token decides: a page cannot send one it has not."""

    @pytest.fixture
    def site_settings(self) -> dict[str, Any]:
        return {"tokens": ["pub"], "admin_token": "adm"}

    async def test_a_token_is_taken_under_any_name(self, site_hub: Hub) -> None:
        hub = site_hub
        elsewhere = {**rebinding(hub), "Origin": EVIL, "Sec-Fetch-Site": "cross-site"}
        pub = {**elsewhere, "Authorization": "Bearer pub"}
        status, _ = await ask(hub, "POST", "/topics/t", pub, data=notification(changes(1)))
        assert status == 202
        adm = {**elsewhere, "Authorization": "Bearer adm"}
        assert (await ask(hub, "GET", "/admin/overview.json", adm))[0] == 200
        assert (await ask(hub, "GET", "/admin/overview.json", elsewhere))[0] == 401


class TestListedCorsOrigins:
    """Origins the operator listed in RSHUB_CORS_ORIGINS keep publishing from their pages;
    ``*`` grants reading to every page, acting to none."""

    APP = "http://app.example:3000"

    @pytest.fixture
    def site_settings(self) -> dict[str, Any]:
        return {"cors_origins": [self.APP, "*"]}

    async def test_a_listed_origin_publishes_others_do_not(self, site_hub: Hub) -> None:
        hub = site_hub
        page = {"Origin": self.APP, "Sec-Fetch-Site": "cross-site"}
        body = notification(changes(1))
        status, answer = await ask(hub, "POST", "/topics/t", page, data=body)
        assert status == 202, answer
        refused(await ask(hub, "POST", "/topics/t", {"Origin": EVIL}, data=body), "Origin")
        async with hub.session.get(
            hub.url + "/topics/t/changelist.xml", headers={"Origin": EVIL}
        ) as r:
            assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == "*"
        assert await topic_length(hub, "t") == 1


# -- the fuzz ---------------------------------------------------------------------------------

FUZZ_SEED = 20261202
FUZZ_REQUESTS = 400

OWN_NAMES = ["localhost", "127.0.0.1", "[::1]", "hub.example", "rshub.test", "127.0.0.2"]
FOREIGN_NAMES = [
    "evil.example",
    "localhost.evil.example",
    "hub.example.evil.example",
    "127.0.0.1.nip.invalid",
    "xn--80ak6aa92e.invalid",
    "rshub.test.invalid",
    "0x7f000001",
    "2130706433",
    "local%68ost",
]
HOSTILE_BYTES = [b"\xfe\xff", b"\x00", b" ", b"@", b"/", b"#", b"\\", b"..", b"\xe2\x80\xae"]


def _host(rng: random.Random, port: int) -> tuple[bytes | None, bool, bool]:
    """A ``Host`` value (None: none sent), whether it names the hub (by construction), and
    whether it holds bytes no header may (the HTTP parser may refuse those first)."""
    roll = rng.random()
    if roll < 0.1:
        return None, True, False
    own = roll < 0.5
    name = rng.choice(OWN_NAMES if own else FOREIGN_NAMES)
    if rng.random() < 0.3:
        name = "".join(c.upper() if rng.random() < 0.5 else c for c in name)
    tail = rng.choice(["", f":{port}", ":8080", ":9000", ":1"])
    value = (name + tail).encode()
    if rng.random() < 0.25:  # hostile bytes: never a name of the hub any more
        cut = rng.randrange(len(value) + 1)
        value = value[:cut] + rng.choice(HOSTILE_BYTES) + b"x" + value[cut:]
        return value, False, True
    return value, own, False


def _origin(rng: random.Random, port: int, host: bytes | None) -> tuple[bytes | None, bool]:
    """An ``Origin`` value (None: none sent) and whether it is the hub's own."""
    roll = rng.random()
    if roll < 0.4:
        return None, True
    own = [f"http://127.0.0.1:{port}", PUBLIC, ALIAS, f"http://localhost:{port}"]
    foreign = [EVIL, "null", "http://127.0.0.1:1", f"https://127.0.0.1:{port}", "file://"]
    foreign += [PUBLIC + "/x", PUBLIC + ".evil.example", "http://hub.example", ""]
    if roll < 0.7:
        return rng.choice(own).encode(), True
    value = rng.choice(foreign).encode()
    if rng.random() < 0.3:
        return value + rng.choice([b"\xff", b"\x00", b"/"]), False
    # The request's own origin (its scheme and Host) is the hub's too: http://127.0.0.1:1
    # with Host: 127.0.0.1:1, http://hub.example with Host: hub.example.
    return value, host is not None and value == b"http://" + host.lower()


async def send(
    port: int,
    method: str,
    path: str,
    body: bytes,
    host: bytes | None,
    origin: bytes | None,
    site: bytes | None,
) -> bytes:
    """One request on its own connection, as these bytes; the whole answer."""
    version = "1.1" if host is not None else "1.0"  # HTTP/1.1 requires a Host
    lines = [f"{method} {path} HTTP/{version}".encode()]
    lines += [b"Host: " + host] if host is not None else []
    lines += [b"Origin: " + origin] if origin is not None else []
    lines += [b"Sec-Fetch-Site: " + site] if site is not None else []
    if path.startswith("/topics/"):
        lines.append(b"Content-Type: application/xml")
    elif body:
        lines.append(b"Content-Type: application/x-www-form-urlencoded")
    lines += [b"Content-Length: %d" % len(body), b"Connection: close", b"", b""]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"\r\n".join(lines) + body)
        return await asyncio.wait_for(reader.read(), 10 * TIME_SCALE)
    finally:
        writer.close()
        await writer.wait_closed()


@pytest.mark.timeout(300)
async def test_a_seeded_fuzz_of_host_origin_and_fetch_site(site_hub: Hub, redis_url: str) -> None:
    """Random requests to admin views, admin actions, publishes and subscribes, each with a
    random ``Host``, ``Origin`` and ``Sec-Fetch-Site``: every refusal a 403 (or a 400 for
    bytes no header may hold) naming the header; everything that passed had only own
    names and origins; no 5xx, no stall, no ERROR line, no leaked socket; and exactly the
    publishes answered 202 are stored."""
    hub = site_hub
    port = port_of(hub)
    rng = random.Random(FUZZ_SEED)
    routes = [
        ("GET", "/admin/overview.json", b""),
        ("GET", "/admin/subscriptions", b""),
        ("DELETE", "/admin/topics/ghost", b""),
        ("POST", "/admin/subscriptions/resume", b"topic=t&callback=http%3A%2F%2Fcb.invalid%2F"),
        ("POST", "/topics/f", notification(changes(1))),
        ("POST", "/", b"hub.mode=unsubscribe&hub.topic=t&hub.callback=http%3A%2F%2Fcb.invalid%2F"),
    ]
    # Every route once first: the hub's Redis connections are open before sockets are counted.
    for method, path, body in routes:
        answer = await send(port, method, path, body, b"127.0.0.1:%d" % port, None, None)
        assert int(answer[9:12]) < 500, answer[:300]
    published = 1
    passed = 0
    async with Watchdog() as dog:
        for _ in range(FUZZ_REQUESTS):
            method, path, body = rng.choice(routes)
            host, own_host, hostile = _host(rng, port)
            origin, own_origin = _origin(rng, port, host if own_host else None)
            hostile = hostile or (origin is not None and any(b < 32 or b > 126 for b in origin))
            site = rng.choice([None, b"same-origin", b"same-site", b"none", b"cross-site"])
            answer = await send(port, method, path, body, host, origin, site)
            status = int(answer[9:12])
            case = (method, path, host, origin, site, answer[:400])
            assert status < 500, case
            bad = {"Host"} if not own_host else set()
            bad |= {"Origin"} if not own_origin else set()
            bad |= {"Sec-Fetch-Site"} if site == b"cross-site" and origin is None else set()
            if status in (400, 403) and b'"header"' in answer:
                named = orjson.loads(answer.split(b"\r\n\r\n", 1)[1])["header"]
                assert named in bad, case
                continue
            if status == 400 and hostile:  # bytes the HTTP parser refused
                continue
            assert not bad, case
            passed += 1
            published += status == 202 and path == "/topics/f"
        assert passed > FUZZ_REQUESTS // 10  # the own names got through, not only refusals
    # Redis connections the hub's pool opened for requests at once are kept, not leaked.
    await dog.sockets_back()
    assert await topic_length(hub, "f") == published
