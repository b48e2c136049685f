"""The attacks on a hub without tokens, played by pages in a real headless Chromium.

Chromium resolves ``evil.example`` and ``attacker.example`` to 127.0.0.1
(``--host-resolver-rules``), as a DNS answer of the attacker's would:

- **DNS rebinding**: a page of ``http://evil.example:PORT`` (the hub's port; its document is
  the attacker's, as it was before the name was rebound to 127.0.0.1) fetches
  ``/admin/overview.json`` and ``DELETE /admin/topics/victim``: same-origin for the
  browser, so it may read the answers. The hub refuses both (``Host``).
- **A cross-site page** on ``http://attacker.example:OTHER`` (a real server on 127.0.0.1)
  posts a form to ``/admin/subscriptions/resume`` and publishes with ``fetch`` in
  ``no-cors`` mode (a body without Content-Type, which needs no preflight). The hub
  refuses both (``Origin``): the subscription stays suspended, nothing is stored.

Each attack is also played against a control hub that names the page's origin as its own
(an alias, a CORS origin): there the same page reads the overview and publishes, so the
refusals are the hub's, not the browser's. And the dashboard still works in the same
browser, under 127.0.0.1 and localhost.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import aiohttp
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from hub.core.settings import Settings
from tests.conftest import Hub, start_hub
from tests.hub.callback_server import CallbackServer
from tests.hub.page_site import PageSite, page_site
from tests.hub.test_dashboard import _chromium, _open
from tests.support import changes, free_port, notification, wait_for

SECRET = "apikey=s3cr3t-in-the-callback"
#: The topic attacked on the hub, and the control hub's (both hubs share one Redis).
TOPICS = ("victim", "decoy")

#: The page whose name was rebound: same-origin requests to whatever it now points at.
REBOUND_PAGE = """<!doctype html>
<html><body><p id="read">reading</p><p id="delete">deleting</p>
<script>
const say = (id, text) => { document.getElementById(id).textContent = text; };
fetch("/admin/overview.json")
  .then(r => r.text().then(t => say("read", r.status + " " + t)))
  .catch(e => say("read", "blocked " + e));
fetch("/admin/topics/" + location.search.slice(1), {method: "DELETE"})
  .then(r => r.text().then(t => say("delete", r.status + " " + t)))
  .catch(e => say("delete", "blocked " + e));
</script></body></html>
"""

#: The cross-site page: a form POST and a "simple" publish, as any site could send.
CROSS_SITE_PAGE = """<!doctype html>
<html><body><p id="form">posting</p><p id="publish">publishing</p>
<iframe name="sink" id="sink"></iframe>
<form id="resume" method="POST" target="sink">
  <input name="topic" id="topic"><input name="callback" id="callback">
</form>
<script>
const params = new URLSearchParams(location.search);
const hub = params.get("hub");
const say = (id, text) => { document.getElementById(id).textContent = text; };
const form = document.getElementById("resume");
form.action = hub + "/admin/subscriptions/resume";
document.getElementById("callback").value = params.get("callback");
document.getElementById("topic").value = params.get("topic");
document.getElementById("sink").onload = () => say("form", "sent");
form.submit();
const planted = new Blob([NOTIFICATION]);  // no type: no Content-Type, no preflight
fetch(hub + "/topics/" + params.get("topic"), {method: "POST", mode: "no-cors", body: planted})
  .then(() => say("publish", "sent")).catch(e => say("publish", "blocked " + e));
</script></body></html>
"""


@pytest.fixture
async def attacker() -> AsyncIterator[PageSite]:
    """The cross-site page's server, on 127.0.0.1; the browser knows it as attacker.example."""
    body = notification([{"loc": "http://example.org/planted", "change": "created"}])
    page = CROSS_SITE_PAGE.replace("NOTIFICATION", json.dumps(body.decode()))
    async with page_site(page, host="attacker.example") as site:
        yield site


#: Chromium's own guards against pages reaching private addresses (Local/Private Network
#: Access): off, as in browsers that have none.
LOCAL_NETWORK_CHECKS = [
    "LocalNetworkAccessChecks",
    "BlockInsecurePrivateNetworkRequests",
    "PrivateNetworkAccessSendPreflights",
    "PrivateNetworkAccessRespectPreflightResults",
]


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    rules = "MAP evil.example 127.0.0.1, MAP attacker.example 127.0.0.1"
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=_chromium(),
            args=[
                "--no-sandbox",
                "--disable-gpu",
                f"--host-resolver-rules={rules}",
                # A browser that lets a page reach this machine: one without Local Network
                # Access checks, or whose user allowed it. The hub must hold on its own.
                f"--disable-features={','.join(LOCAL_NETWORK_CHECKS)}",
            ],
        )
        yield browser
        await browser.close()


SETTINGS: dict[str, Any] = {
    "allow_private_callbacks": True,  # the callbacks here are on loopback
    "retry_base_seconds": 30.0,  # a failed delivery waits: only a resume brings it back
    "retry_max_seconds": 60.0,
    "suspend_after_failures": 1,
}


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return dict(SETTINGS)


@pytest.fixture
async def control(redis_url: str, attacker: PageSite) -> AsyncIterator[Hub]:
    """A hub that names both attackers' origins as its own (an alias, a CORS origin)."""
    port = free_port()
    settings = Settings(
        host="127.0.0.1",
        port=port,
        alias_urls=[f"http://evil.example:{port}"],
        cors_origins=[attacker.origin],
        **SETTINGS,
    )
    runner, app = await start_hub(settings, redis_url)
    async with aiohttp.ClientSession() as session:
        yield Hub(settings.public_url, app, settings, session)
    await runner.cleanup()


async def api(hub: Hub, method: str, path: str) -> Any:
    async with hub.session.request(method, hub.url + path) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def suspended_victim(hub: Hub, topic: str) -> CallbackServer:
    """``topic`` with 2 changes and a subscription whose callback carries a secret and
    failed: suspended until an operator resumes it."""
    failing = await CallbackServer(statuses=[500]).start()
    failing.url += "?" + SECRET
    form = {
        "hub.mode": "subscribe",
        "hub.topic": f"{hub.url}/topics/{topic}",
        "hub.callback": failing.url,
    }
    async with hub.session.post(hub.url + "/", data=form) as resp:
        assert resp.status == 202, await resp.text()
    await wait_for(lambda: len(failing.verifications) == 1)
    await hub.publish(topic, notification(changes(2)))

    async def suspended() -> bool:
        rows = (await api(hub, "GET", f"/admin/subscriptions?topic={topic}"))["subscriptions"]
        return bool(rows) and rows[0]["state"] == "suspended"

    await wait_for(suspended)
    return failing


async def rebound_page(browser: Browser, hub: Hub, topic: str) -> Page:
    """The attacker's document at ``http://evil.example:PORT/rebound``, served as it was
    before the name pointed at 127.0.0.1; everything it fetches then goes to the hub."""
    port = hub.url.rsplit(":", 1)[1]
    url = f"http://evil.example:{port}/rebound?{topic}"
    page = await browser.new_page()
    await page.route(url, lambda route: route.fulfill(body=REBOUND_PAGE, content_type="text/html"))
    await page.goto(url)
    return page


async def state_and_length(hub: Hub, topic: str) -> tuple[str, int]:
    rows = (await api(hub, "GET", f"/admin/subscriptions?topic={topic}"))["subscriptions"]
    return rows[0]["state"], (await api(hub, "GET", f"/admin/topics/{topic}"))["length"]


async def test_a_rebinding_page_reads_and_deletes_nothing(
    hub: Hub, control: Hub, browser: Browser
) -> None:
    callbacks = [await suspended_victim(h, t) for h, t in zip((hub, control), TOPICS, strict=True)]
    try:
        page = await rebound_page(browser, hub, "victim")
        await expect(page.locator("#read")).to_contain_text('403 {"error": "Host', timeout=10_000)
        await expect(page.locator("#delete")).to_contain_text("403", timeout=10_000)
        assert SECRET not in await page.locator("#read").inner_text()
        assert await state_and_length(hub, "victim") == ("suspended", 2)

        # The same page, where the hub names evil.example as its own: the browser let it
        # read the secret and delete the topic. It is the hub that refused above.
        page = await rebound_page(browser, control, "decoy")
        await expect(page.locator("#read")).to_contain_text(SECRET, timeout=10_000)
        await expect(page.locator("#delete")).to_contain_text('"deleted": true')
    finally:
        for callback in callbacks:
            await callback.stop()


async def test_a_cross_site_page_resumes_and_publishes_nothing(
    hub: Hub, control: Hub, browser: Browser, attacker: PageSite
) -> None:
    callbacks = [await suspended_victim(h, t) for h, t in zip((hub, control), TOPICS, strict=True)]
    try:
        for target, topic, callback in zip((hub, control), TOPICS, callbacks, strict=True):
            query = urlencode({"hub": target.url, "topic": topic, "callback": callback.url})
            page = await _open(browser, f"{attacker.origin}/?{query}")
            await expect(page.locator("#form")).to_have_text("sent")
            await expect(page.locator("#publish")).to_have_text("sent")
        # The control hub took both from its listed origin: the browser sent them.
        await wait_for(lambda: len(callbacks[1].ids) == 3, timeout=10)
        assert await state_and_length(control, "decoy") == ("active", 3)
        # This hub refused both: still suspended, nothing planted.
        assert await state_and_length(hub, "victim") == ("suspended", 2)
        assert callbacks[0].ids == []
    finally:
        for callback in callbacks:
            await callback.stop()


async def test_the_dashboard_still_works_in_the_browser(hub: Hub, browser: Browser) -> None:
    await hub.publish("wiki", notification(changes(3)))
    port = hub.url.rsplit(":", 1)[1]
    for base in (hub.url, f"http://localhost:{port}"):
        page = await _open(browser, base + "/")
        await expect(page.locator("#topics tbody")).to_contain_text("wiki")
        await expect(page.locator("#health")).to_contain_text("health: ok")
        assert await page.locator("#login").is_hidden()
        assert page.errors == []  # type: ignore[attr-defined]
