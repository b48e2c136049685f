"""Without ``alias_links`` (the default) documents link with the public base, whatever
``Host`` a client sent: a reverse proxy that sends its upstream's name (``127.0.0.1:8080``)
must not leak it into public documents."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Hub
from tests.hub.test_alias_links import BASE, HREF, loopback
from tests.support import changes, notification


@pytest.fixture
def hub_settings() -> dict[str, Any]:
    return {"base_url": BASE}


async def test_by_default_documents_link_with_the_public_base(hub: Hub) -> None:
    here = loopback(hub)
    await here.publish("demo", notification(changes(1)))
    for path in ("/.well-known/resourcesync", "/topics/demo/changelist.xml"):
        async with here.session.get(here.url + path) as resp:
            body = await resp.read()
        hrefs = {h.decode().split("/topics/")[0] for h in HREF.findall(body)}
        assert hrefs - {"http://example.org/r0"} == {BASE}, (path, hrefs)
