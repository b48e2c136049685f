"""A page on another origin follows a private topic in a real headless Chromium: CORS
(``RSHUB_CORS_ORIGINS``) and a short-lived signed read token (``?access_token=`` for
``EventSource``, ``Authorization`` for ``fetch``). A page on an origin not listed gets
nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import pytest
from playwright.async_api import Browser, Page, expect

from hub.core.read_tokens import mint
from tests.conftest import Hub
from tests.hub.page_site import PageSite, page_site
from tests.hub.test_dashboard import _open, browser
from tests.support import notification

__all__ = ["browser"]  # the Chromium fixture, shared with the dashboard test

KEY = "browser-test-signing-key-0123456789abcdef"

PAGE = """<!doctype html>
<html><body>
<p id="state">starting</p><p id="doc">fetching</p><ul id="events"></ul>
<script>
const params = new URLSearchParams(location.search);
const hub = params.get("hub"), token = params.get("token");
const say = (id, text) => { document.getElementById(id).textContent = text; };
fetch(hub + "/topics/private/changelist.xml", {headers: {Authorization: "Bearer " + token}})
  .then(r => r.text().then(t => say("doc", "doc " + r.status + " " + t.length)))
  .catch(() => say("doc", "doc blocked"));
const es = new EventSource(
  hub + "/topics/private/events?access_token=" + encodeURIComponent(token));
es.onopen = () => say("state", "open");
es.onerror = () => say("state", "error");
es.onmessage = (m) => {
  const li = document.createElement("li");
  li.textContent = m.data;
  document.getElementById("events").appendChild(li);
};
</script>
</body></html>
"""


@pytest.fixture
async def site() -> AsyncIterator[PageSite]:
    """Another origin than the hub's, named in its ``RSHUB_CORS_ORIGINS``."""
    async with page_site(PAGE) as server:
        yield server


@pytest.fixture
async def elsewhere() -> AsyncIterator[PageSite]:
    """Another origin, not named."""
    async with page_site(PAGE) as server:
        yield server


@pytest.fixture
def hub_settings(site: PageSite) -> dict[str, Any]:
    return {"tokens": ["pub"], "read_tokens": ["r"], "jwt_key": KEY, "cors_origins": [site.origin]}


async def follow(browser: Browser, page_site: PageSite, hub: Hub, token: str) -> Page:
    return await _open(
        browser, f"{page_site.origin}/?{urlencode({'hub': hub.url, 'token': token})}"
    )


async def test_a_page_on_a_listed_origin_follows_a_private_topic_others_get_nothing(
    hub: Hub, browser: Browser, site: PageSite, elsewhere: PageSite
) -> None:
    pub = {"Authorization": "Bearer pub"}
    await hub.publish("private", notification([{"loc": "http://example.org/first"}]), **pub)
    token = mint(KEY, ["private"], 300)
    page = await follow(browser, site, hub, token)
    stranger = await follow(browser, elsewhere, hub, token)
    await expect(page.locator("#state")).to_have_text("open")
    await expect(page.locator("#doc")).to_contain_text("doc 200")  # a preflighted fetch

    loc = "http://example.org/seen-in-the-browser"
    await hub.publish("private", notification([{"loc": loc, "change": "created"}]), **pub)
    await expect(page.locator("#events li").last).to_contain_text(loc)

    # The page on the origin not listed: its stream and its fetch were refused by the
    # browser (no grant), and it saw none of the changes the other page saw.
    await expect(stranger.locator("#state")).to_have_text("error")
    await expect(stranger.locator("#doc")).to_have_text("doc blocked")
    assert await stranger.locator("#events li").count() == 0
    assert page.errors == [] and stranger.errors == []  # type: ignore[attr-defined]
