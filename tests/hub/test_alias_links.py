"""A client that reaches the hub under an alias gets links it can follow.

The compose file's hub has the base URL ``http://hub:8080`` (what the other containers use)
and the host's published address as an alias. A client on the host must be able to walk
every document and poll from there, so with ``alias_links`` (the compose file sets it) links
follow the alias a direct client's ``Host`` named. Any other ``Host``, any proxied request,
and every request without ``alias_links`` get the public base: links never name a host the
operator did not list, nor the upstream name a reverse proxy sends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from typing import Any

import aiohttp
import pytest

from subscriber.follower import Follower
from subscriber.position import EventCursor
from tests.conftest import Hub
from tests.support import changes, notification

#: The hub's public base: a name this test machine cannot reach, like ``hub`` from the host.
BASE = "http://hub.invalid:8080"
#: Links in a document: ``rs:ln`` hrefs and the ``loc`` of index and capability entries.
HREF = re.compile(rb'(?:href="|<loc>)([^"<]+)')


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    # Two Resource List pages of 2 entries, so the stored snapshot pages are served too.
    return {"base_url": BASE, "alias_links": True, "resourcelist_page_entries": 2}


def loopback(hub: Hub, name: str = "127.0.0.1") -> Hub:
    """The same hub, addressed as a client on this machine would address it."""
    return dataclasses.replace(hub, url=f"http://{name}:{hub.settings.port}")


async def walk(session: aiohttp.ClientSession, start: str) -> dict[str, bytes]:
    """Every hub document reachable from ``start`` by its links, fetched as a poller would."""
    seen: dict[str, bytes] = {}
    todo = [start]
    while todo and len(seen) < 50:
        url = todo.pop()
        if url in seen:
            continue
        async with session.get(url) as resp:
            assert resp.status == 200, (url, resp.status, await resp.text())
            seen[url] = await resp.read()
        for href in HREF.findall(seen[url]):
            link = href.decode()
            if link.startswith("http") and "example.org" not in link:
                todo.append(link)
    return seen


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost"])
async def test_every_link_follows_the_alias_the_client_used(hub: Hub, name: str) -> None:
    here = loopback(hub, name)
    resp = await here.publish("demo", notification(changes(5)))
    assert resp.status == 202, await resp.text()
    docs = await walk(here.session, f"{here.url}/.well-known/resourcesync")
    # source description, capability list, Change List index and page, Resource List index
    # and its 3 stored snapshot pages
    assert len(docs) >= 7, sorted(docs)
    for url, body in docs.items():
        assert url.startswith(here.url), url
        assert b"hub.invalid" not in body, (url, body[:400])
    async with here.session.get(f"{here.url}/topics/demo") as resp:
        assert here.url in resp.headers["Link"] and "hub.invalid" not in resp.headers["Link"]
        assert resp.headers["Content-Location"].startswith(here.url)


async def test_a_host_the_operator_did_not_list_gets_the_public_base(hub: Hub) -> None:
    here = loopback(hub)
    await here.publish("demo", notification(changes(1)))
    headers = {"Host": "evil.invalid"}
    async with here.session.get(f"{here.url}/topics/demo/changelist.xml", headers=headers) as r:
        body = await r.read()
    assert r.status == 200
    hrefs = {h.decode().split("/topics/")[0] for h in HREF.findall(body)}
    assert hrefs - {"http://example.org/r0"} == {BASE}


@pytest.mark.parametrize(
    "proxy", [{"X-Forwarded-For": "192.0.2.1"}, {"Forwarded": "for=192.0.2.1"}]
)
async def test_a_proxied_request_gets_the_public_base(hub: Hub, proxy: dict[str, str]) -> None:
    here = loopback(hub)
    await here.publish("demo", notification(changes(1)))
    async with here.session.get(f"{here.url}/topics/demo/changelist.xml", headers=proxy) as r:
        body = await r.read()
    hrefs = {h.decode().split("/topics/")[0] for h in HREF.findall(body)}
    assert hrefs - {"http://example.org/r0"} == {BASE}


async def test_each_alias_gets_its_own_cached_copy(hub: Hub) -> None:
    """A document built for one alias is never served to another (the build caches and the
    page cache are keyed by the base)."""
    first, second = loopback(hub), loopback(hub, "localhost")
    await first.publish("demo", notification(changes(3)))
    for _ in range(2):  # the second round is served from the caches
        for here in (first, second):
            async with here.session.get(f"{here.url}/topics/demo") as resp:
                body = await resp.read()
            hrefs = {h.decode().split("/topics/")[0] for h in HREF.findall(body)}
            assert {h for h in hrefs if "example.org" not in h} == {here.url}, hrefs


async def test_polling_from_an_alias_follows_the_topic(hub: Hub) -> None:
    """What failed from the host with ``Cannot connect to host hub:8080``."""
    here = loopback(hub)
    await here.publish("f", notification(changes(3)))
    async with aiohttp.ClientSession() as session:
        follower = Follower(
            session, EventCursor(), hub=here.url, topic="f", via="poll", poll_interval=0.1
        )
        got: list[str] = []

        async def consume() -> None:
            async for event in follower.events():
                got.append(event.loc)
                if len(got) >= 5:
                    return

        async with follower:
            await here.publish("f", notification(changes(2, start=3)))
            await asyncio.wait_for(consume(), 15)
    assert got == [f"http://example.org/r{i}" for i in range(5)]
