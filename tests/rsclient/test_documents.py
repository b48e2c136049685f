"""The shared conditional-GET client and discovery walk, against a real server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from resourcesync import ChangeList
from rsclient.discovery import Notification, discover
from rsclient.documents import DocumentClient
from rsclient.exceptions import DiscoveryError, SourceError

NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)


def urlset(capability: str, urls: str = "", *, up: str | None = None, md: str = "") -> bytes:
    link = f'<rs:ln rel="up" href="{up}"/>' if up else ""
    return (f'<urlset {NS}>{link}<rs:md capability="{capability}"{md}/>{urls}</urlset>').encode()


def cap(loc: str, capability: str, extra: str = "") -> str:
    return f'<url><loc>{loc}</loc><rs:md capability="{capability}"/>{extra}</url>'


class Source:
    """Static documents by path, each with an ETag; records (path, If-None-Match, status)."""

    def __init__(self) -> None:
        self.docs: dict[str, bytes] = {}
        self.requests: list[tuple[str, str | None, int]] = []
        self.base = ""
        self.app = web.Application()
        self.app.router.add_get("/{path:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.Response:
        path = "/" + request.match_info["path"]
        condition = request.headers.get("If-None-Match")
        body = self.docs.get(path)
        if body is None:
            status, resp = 404, web.Response(status=404)
        elif path.startswith("/broken"):
            status, resp = 500, web.Response(status=500)
        else:
            etag = f'"{hash(body) & 0xFFFFFFFF:x}"'
            if condition == etag:
                status, resp = 304, web.Response(status=304, headers={"ETag": etag})
            else:
                status = 200
                resp = web.Response(body=body, content_type="application/xml")
                resp.headers["ETag"] = etag
        self.requests.append((path, condition, status))
        return resp


@pytest.fixture
async def source() -> AsyncIterator[Source]:
    src = Source()
    async with TestServer(src.app, host="127.0.0.1") as server:
        src.base = str(server.make_url("")).rstrip("/")
        yield src


async def test_304_returns_the_kept_document_or_none(
    source: Source, session: aiohttp.ClientSession
) -> None:
    source.docs["/cl.xml"] = urlset("changelist", md=' from="2026-01-01T00:00:00Z"')
    client = DocumentClient(session)
    first = await client.get(f"{source.base}/cl.xml", keep=True)
    assert first.changed and isinstance(first.doc, ChangeList) and first.validators.etag
    again = await client.get(f"{source.base}/cl.xml")
    assert not again.changed and again.doc is first.doc  # kept by the first GET
    assert not (await client.get(f"{source.base}/cl.xml")).changed
    assert [s for _, _, s in source.requests] == [200, 304, 304]
    assert source.requests[1][1] == first.validators.etag
    client.forget(f"{source.base}/cl.xml")
    assert (await client.get(f"{source.base}/cl.xml")).changed  # unconditional again


async def test_validators_wait_for_remember(source: Source, session: aiohttp.ClientSession) -> None:
    source.docs["/cl.xml"] = urlset("changelist", md=' from="2026-01-01T00:00:00Z"')
    client = DocumentClient(session)
    url = f"{source.base}/cl.xml"
    staged = await client.get(url, keep=True, remember=False)
    assert (await client.get(url, remember=False)).changed  # nothing remembered yet
    client.remember(url, staged)
    unchanged = await client.get(url)
    assert not unchanged.changed and unchanged.doc is staged.doc
    assert [c is None for _, c, _ in source.requests] == [True, True, False]


async def test_fetch_refetches_a_304_it_did_not_keep(
    source: Source, session: aiohttp.ClientSession
) -> None:
    source.docs["/cl.xml"] = urlset("changelist", md=' from="2026-01-01T00:00:00Z"')
    client = DocumentClient(session)
    url = f"{source.base}/cl.xml"
    await client.get(url)  # validators remembered, document not kept
    assert isinstance(await client.fetch(url), ChangeList)
    assert [s for _, _, s in source.requests] == [200, 304, 200]


async def test_failures_are_source_errors(source: Source, session: aiohttp.ClientSession) -> None:
    source.docs["/broken.xml"] = b"<x/>"
    source.docs["/text"] = b"hello"
    source.docs["/big.xml"] = urlset("changelist", cap("http://e/x", "changelist") * 100)
    client = DocumentClient(session, max_bytes=1000)
    with pytest.raises(SourceError, match="HTTP 500"):
        await client.get(f"{source.base}/broken.xml")
    with pytest.raises(SourceError, match="HTTP 404"):
        await client.get(f"{source.base}/missing.xml")
    with pytest.raises(SourceError, match="not a ResourceSync document"):
        await client.get(f"{source.base}/text")
    with pytest.raises(SourceError, match="not a ResourceSync document"):
        await client.get(f"{source.base}/big.xml")
    with pytest.raises(SourceError, match="ClientConnectorError"):
        await DocumentClient(session).get("http://127.0.0.1:9/x.xml")


async def test_discovery_walks_down_and_chooses(
    source: Source, session: aiohttp.ClientSession
) -> None:
    b = source.base
    hub = '<rs:ln rel="hub" href="http://hub.example/"/>'
    source.docs["/sd.xml"] = urlset(
        "description",
        cap(f"{b}/a/caps.xml", "capabilitylist") + cap(f"{b}/b/caps.xml", "capabilitylist"),
    )
    for name in ("a", "b"):
        source.docs[f"/{name}/caps.xml"] = urlset(
            "capabilitylist",
            cap(f"{b}/{name}/rl.xml", "resourcelist")
            + cap(f"{b}/{name}/cl.xml", "changelist")
            + cap(f"{b}/{name}/topic", "changelist-notification", hub),
        )
    fetch = DocumentClient(session).fetch
    everything = await discover(fetch, f"{b}/sd.xml")
    assert everything.capability_lists == [f"{b}/a/caps.xml", f"{b}/b/caps.xml"]
    assert everything.changelists == [f"{b}/a/cl.xml", f"{b}/b/cl.xml"]
    assert everything.resourcelists == [f"{b}/a/rl.xml", f"{b}/b/rl.xml"]
    assert everything.notifications[1] == Notification(f"{b}/b/topic", "http://hub.example/")

    def only_b(url: str, caps: list[str]) -> list[str]:
        assert url == f"{b}/sd.xml"
        return [c for c in caps if "/b/" in c]

    chosen = await discover(fetch, f"{b}/sd.xml", choose=only_b)
    assert (chosen.changelist, chosen.resourcelist, chosen.hub) == (
        f"{b}/b/cl.xml",
        f"{b}/b/rl.xml",
        "http://hub.example/",
    )


async def test_discovery_from_a_change_list_follows_up_only_if_asked(
    source: Source, session: aiohttp.ClientSession
) -> None:
    b = source.base
    source.docs["/caps.xml"] = urlset(
        "capabilitylist", cap(f"{b}/rl.xml", "resourcelist") + cap(f"{b}/other.xml", "changelist")
    )
    source.docs["/cl.xml"] = urlset(
        "changelist", up=f"{b}/caps.xml", md=' from="2026-01-01T00:00:00Z"'
    )
    fetch = DocumentClient(session).fetch
    found = await discover(fetch, f"{b}/cl.xml")
    assert found.changelist == f"{b}/cl.xml"  # the start wins over the Capability List's
    assert (found.capability_list, found.resourcelist) == (f"{b}/caps.xml", f"{b}/rl.xml")
    alone = await discover(fetch, f"{b}/cl.xml", follow_up=False)
    assert alone.changelists == [f"{b}/cl.xml"] and alone.capability_lists == []
    source.docs["/lost.xml"] = urlset(
        "changelist", up=f"{b}/gone.xml", md=' from="2026-01-01T00:00:00Z"'
    )
    lost = await discover(fetch, f"{b}/lost.xml")  # a dead rel=up is not an error
    assert lost.changelists == [f"{b}/lost.xml"] and lost.resourcelist is None


async def test_discovery_dead_ends(source: Source, session: aiohttp.ClientSession) -> None:
    b = source.base
    source.docs["/dump.xml"] = urlset("resourcedump")
    source.docs["/loop.xml"] = urlset("description", cap(f"{b}/loop.xml", "capabilitylist"))
    fetch = DocumentClient(session).fetch
    with pytest.raises(DiscoveryError, match="leads to no changes"):
        await discover(fetch, f"{b}/dump.xml")
    with pytest.raises(DiscoveryError, match="nested more than 4 levels"):
        await discover(fetch, f"{b}/loop.xml")


@pytest.mark.parametrize(
    "host",
    ["a" * 64 + ".invalid", "cl..invalid", "a." * 127 + "invalid"],
    ids=["label", "empty", "name"],
)
async def test_a_link_whose_host_no_lookup_takes_is_a_source_error(
    session: aiohttp.ClientSession, host: str
) -> None:
    """A link (in a Source's document, say) to a host the resolver's IDNA step refuses: a
    SourceError naming the rule, as any failed GET is; its UnicodeError went through every
    caller before."""
    with pytest.raises(SourceError, match="not a valid host name"):
        await DocumentClient(session).fetch(f"http://{host}/cl.xml")


async def test_a_redirect_to_a_host_no_lookup_takes_is_a_source_error(
    session: aiohttp.ClientSession,
) -> None:
    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"http://{'a' * 64}.invalid/cl.xml")

    app = web.Application()
    app.router.add_get("/cl.xml", redirect)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        with pytest.raises(SourceError, match="UnicodeError"):
            await DocumentClient(session).fetch(str(server.make_url("/cl.xml")))
    finally:
        await server.close()
