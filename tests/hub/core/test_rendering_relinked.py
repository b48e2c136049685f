"""Stored snapshot pages relinked for a client that addressed the hub by an alias."""

from __future__ import annotations

from hub.core import rendering
from hub.core.topics import HubUrls

BASE, ALIAS = "http://hub:8080", "http://localhost:8080"


def test_only_the_root_links_change_never_a_resource_uri() -> None:
    head = rendering.URLSET_OPEN + rendering.root(
        "resourcelist", [("up", f"{BASE}/topics/t/capabilitylist.xml")], at=0
    )
    # A resource the source happens to host under the hub's own base keeps its URI.
    page = rendering.resource_page(head, [])
    page = page.replace(b"</urlset>", f"<url><loc>{BASE}/x</loc></url></urlset>".encode())
    out = rendering.relinked(page, BASE, ALIAS)
    assert f'href="{ALIAS}/topics/t/capabilitylist.xml"'.encode() in out
    assert f"<loc>{BASE}/x</loc>".encode() in out
    assert out.replace(ALIAS.encode(), BASE.encode()) == page


def test_addressed_as_an_alias_swaps_base_and_alias_and_nothing_else() -> None:
    urls = HubUrls(BASE, (ALIAS, "http://127.0.0.1:8080"))
    there = urls.addressed_as(ALIAS)
    assert there.base == ALIAS and set(there.aliases) == {BASE, "http://127.0.0.1:8080"}
    assert there.tag != urls.tag  # ETags and caches tell the two renderings apart
    assert there.is_own_topic(f"{BASE}/topics/t") and there.is_own_topic(f"{ALIAS}/topics/t")
    assert urls.addressed_as("http://evil.invalid") is urls
    assert urls.addressed_as(BASE) is urls
    assert urls.addressed_as(ALIAS) is there  # memoized: built once per alias
