"""Discovery: the Source Description and Capability Lists, behind a proxy's base URL too."""

from __future__ import annotations

from typing import Any

import pytest

from resourcesync import CapabilityList, SourceDescription
from tests.conftest import Hub
from tests.hub.documents_support import get_doc, links
from tests.support import changes, notification

BASE = "https://sync.example.org/hub"


async def test_capability_list_and_source_description(hub: Hub) -> None:
    for topic in ("alpha", "beta"):
        assert (await hub.publish(topic, notification(changes(1)))).status == 202
    _, sd, _ = await get_doc(hub.session, f"{hub.url}/.well-known/resourcesync", hub.url, "alpha")
    assert isinstance(sd, SourceDescription)
    assert [e.loc for e in sd.entries] == [
        f"{hub.url}/topics/{t}/capabilitylist.xml" for t in ("alpha", "beta")
    ]
    for entry in sd.entries:
        topic = entry.loc.split("/")[-2]
        _, cap, _ = await get_doc(hub.session, entry.loc, hub.url, topic)
        assert isinstance(cap, CapabilityList)
        assert links(cap)["up"] == f"{hub.url}/.well-known/resourcesync"
        by_cap = {str(e.md.capability): e for e in cap.entries}
        assert by_cap["resourcelist"].loc == f"{hub.url}/topics/{topic}/resourcelist.xml"
        assert by_cap["changelist"].loc == f"{hub.url}/topics/{topic}/changelist.xml"
        note = by_cap["changelist-notification"]
        assert note.loc == f"{hub.url}/topics/{topic}"
        assert {ln.rel: ln.href for ln in note.links} == {"hub": f"{hub.url}/"}
        # every advertised document is served and valid
        for e in cap.entries:
            await get_doc(hub.session, e.loc, hub.url, topic)


async def test_unknown_topic(hub: Hub) -> None:
    async with hub.session.get(f"{hub.url}/topics/nothing/capabilitylist.xml") as resp:
        assert resp.status == 404
        body = await resp.json()
        assert body["topic"] == "nothing" and "unknown topic" in body["error"]
    async with hub.session.get(f"{hub.url}/topics/bad%20name/capabilitylist.xml") as resp:
        assert resp.status == 400


async def test_empty_source_description(hub: Hub) -> None:
    _, sd, _ = await get_doc(hub.session, f"{hub.url}/.well-known/resourcesync", hub.url, "x")
    assert isinstance(sd, SourceDescription) and sd.entries == ()


class TestBehindProxy:
    @pytest.fixture
    def hub_settings(self) -> dict[str, Any]:
        return {"base_url": BASE + "/"}

    async def test_documents_use_the_public_url(self, hub: Hub) -> None:
        local = hub.session
        async with local.post(
            f"http://127.0.0.1:{hub.settings.port}/topics/t",
            data=notification(changes(3)),
            headers={"Content-Type": "application/xml"},
        ) as resp:
            assert resp.status == 202

        async def fetch(path: str) -> bytes:
            async with local.get(f"http://127.0.0.1:{hub.settings.port}{path}") as resp:
                assert resp.status == 200
                return await resp.read()

        cap = (await fetch("/topics/t/capabilitylist.xml")).decode()
        assert f"{BASE}/topics/t/changelist.xml" in cap and f'href="{BASE}/"' in cap
        assert "127.0.0.1" not in cap
        for path in (
            "/.well-known/resourcesync",
            "/topics/t/changelist.xml",
            "/topics/t",
            "/topics/t/resourcelist.xml",
        ):
            assert "127.0.0.1" not in (await fetch(path)).decode()
        async with local.get(f"http://127.0.0.1:{hub.settings.port}/topics/t") as resp:
            assert resp.headers["Link"] == (f'<{BASE}/>; rel="hub", <{BASE}/topics/t>; rel="self"')
