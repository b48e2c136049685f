"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

The screenshot is saved under ``tests/artifacts/`` (git-ignored) and its path printed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from playwright.async_api import Browser, Page, async_playwright, expect

from hub.core.placement import subscription_id
from hub.core.settings import Settings
from tests.conftest import Hub, start_hub
from tests.hub.callback_server import CallbackServer
from tests.hub.test_websub import subscribe
from tests.support import TIME_SCALE, changes, free_port, notification, wait_for

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


def _find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _chromium() -> str:
    """Debian's chromium; installed here when missing and we may (root with apt-get), so
    the README's one test command needs nothing installed by hand."""
    found = _find_chromium()
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=False, env=env, timeout=600)
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "chromium"], check=False, env=env, timeout=900
        )
        found = _find_chromium()
    if found is None:
        raise AssertionError("chromium is not installed: apt-get install -y chromium")
    return found


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=_chromium(), args=["--no-sandbox", "--disable-gpu"]
        )
        yield browser
        await browser.close()


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"retry_base_seconds": 0.05, "retry_max_seconds": 0.5}


async def _open(browser: Browser, url: str) -> Page:
    page = await browser.new_page(viewport={"width": 1280, "height": 860})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(url)
    page.set_default_timeout(10_000 * TIME_SCALE)
    page.errors = errors  # type: ignore[attr-defined]
    return page


async def test_dashboard_shows_topics_subscriptions_and_a_live_tail(
    hub: Hub, browser: Browser
) -> None:
    await hub.publish("wiki", notification(changes(5, prefix="http://en.example.org/wiki/A")))
    await hub.publish("news", notification(changes(2, prefix="http://news.example.org/")))
    good = await CallbackServer().start()
    stalled = await CallbackServer(statuses=[503] * 10_000).start()
    try:
        await subscribe(hub, good, topic="wiki")
        await subscribe(hub, stalled, topic="news")
        await hub.publish("news", notification(changes(3, prefix="http://news.example.org/b")))
        await wait_for(lambda: stalled.refused >= 1)

        page = await _open(browser, hub.url + "/")
        topics = page.locator("#topics tbody")
        await expect(topics).to_contain_text("wiki")
        await expect(topics).to_contain_text("news")
        await expect(page.locator("#subs tbody")).to_contain_text("HTTP 503")
        await expect(page.locator("#health")).to_contain_text("health: ok")

        await page.fill("#tail-topic", "wiki")
        await page.click("#tail-form button[type=submit]")
        await expect(page.locator("#tail-state")).to_have_text("tailing wiki")
        await expect(page.locator("#clients")).to_contain_text("1 SSE", timeout=5000)
        # Presence per topic: the tail's SSE client and the WebSub subscription.
        wiki_clients = page.locator("#topics tbody tr", has_text="wiki").locator("td").nth(5)
        await expect(wiki_clients).to_have_text("0 WS · 1 SSE · 1 WebSub", timeout=5000)
        news_clients = page.locator("#topics tbody tr", has_text="news").locator("td").nth(5)
        await expect(news_clients).to_contain_text("1 WebSub")

        loc = "http://en.example.org/wiki/Live_tail_check"
        await hub.publish("wiki", notification([{"loc": loc, "change": "created"}]))
        # Seen in the live tail within 2 s of the publish.
        await expect(page.locator("#tail li").first).to_contain_text(loc, timeout=2000)
        for i in range(4):
            await hub.publish(
                "wiki", notification([{"loc": f"http://en.example.org/wiki/Page_{i}"}])
            )
        await expect(page.locator("#tail li")).to_have_count(5)
        # The next poll counts them: 5 + 1 + 4 published to wiki, at a rate above zero.
        wiki_row = page.locator("#topics tbody tr", has_text="wiki")
        await expect(wiki_row.locator("td").nth(3)).to_have_text("10")
        assert float(await wiki_row.locator("td").nth(1).inner_text()) > 0

        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "dashboard.png"
        await page.screenshot(path=str(shot), full_page=True)
        print(f"dashboard screenshot: {shot}")
        assert shot.stat().st_size > 10_000
        assert page.errors == []  # type: ignore[attr-defined]
    finally:
        await good.stop()
        await stalled.stop()


async def test_behind_tokens_the_page_asks_and_sends_the_token_only_in_a_header(
    redis_url: str, browser: Browser
) -> None:
    settings = Settings(host="127.0.0.1", port=free_port(), tokens=["op-secret"])
    runner, _app = await start_hub(settings, redis_url)
    try:
        async with aiohttp.ClientSession() as session:
            await session.post(
                f"{settings.public_url}/topics/private",
                data=notification(changes(1)),
                headers={"Content-Type": "application/xml", "Authorization": "Bearer op-secret"},
            )
        page = await _open(browser, settings.public_url + "/")
        seen: list[tuple[str, str | None]] = []
        page.on("request", lambda r: seen.append((r.url, r.headers.get("authorization"))))
        await expect(page.locator("#login")).to_be_visible()
        await page.fill("#token", "wrong")
        await page.click("#login button")
        await expect(page.locator("#login-error")).to_contain_text("hub-wide token")
        await page.fill("#token", "op-secret")
        await page.click("#login button")
        await expect(page.locator("#topics tbody")).to_contain_text("private")
        await expect(page.locator("#login")).to_be_hidden()
        assert "Bearer op-secret" in {h for _, h in seen}
        assert not any("op-secret" in url for url, _ in seen)
        stored = await page.evaluate("sessionStorage.getItem('rshub-operator-token')")
        assert stored == "op-secret"
        assert await page.evaluate("localStorage.length") == 0
    finally:
        await runner.cleanup()


async def test_the_admin_token_opens_the_dashboard(redis_url: str, browser: Browser) -> None:
    """The issue saw "this needs a hub-wide token" for the admin token: it must be enough."""
    settings = Settings(
        host="127.0.0.1", port=free_port(), tokens=["pub-secret"], admin_token="adm-secret"
    )
    runner, _app = await start_hub(settings, redis_url)
    try:
        async with aiohttp.ClientSession() as session:
            await session.post(
                f"{settings.public_url}/topics/ops",
                data=notification(changes(1)),
                headers={"Content-Type": "application/xml", "Authorization": "Bearer pub-secret"},
            )
        page = await _open(browser, settings.public_url + "/")
        await expect(page.locator("#login")).to_contain_text("admin token")
        await page.fill("#token", "adm-secret")
        await page.click("#login button")
        await expect(page.locator("#topics tbody")).to_contain_text("ops")
        await expect(page.locator("#login")).to_be_hidden()
        await expect(page.locator("#login-error")).to_be_empty()
        assert page.errors == []  # type: ignore[attr-defined]
    finally:
        await runner.cleanup()


async def test_the_dashboard_shows_the_id_rshub_inspect_takes(hub: Hub, browser: Browser) -> None:
    callback = await CallbackServer().start()
    try:
        await subscribe(hub, callback, topic="wiki")
        page = await _open(browser, hub.url + "/")
        row = page.locator("#subs tbody tr", has_text=callback.url)
        headers = await page.locator("#subs thead th").all_inner_texts()
        cell = row.locator("td").nth(headers.index("id"))
        await expect(cell).to_have_text(subscription_id("wiki", callback.url))
        assert not page.errors  # type: ignore[attr-defined]
    finally:
        await callback.stop()
