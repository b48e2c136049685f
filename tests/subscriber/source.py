"""A small but standard ResourceSync Source for tests: files plus Z39.99 documents.

Serves, on 127.0.0.1, the resources under ``/files/...`` and ``/.well-known/resourcesync``,
``/capabilitylist.xml``, ``/resourcelist.xml``, ``/changelist.xml`` (a Change List Index,
or a plain Change List with ``index=False``) and ``/changelist/{n}.xml`` pages of
``page_size`` changes. ``spec="1.1"`` writes ``rs:md/@datetime`` too. ETag + 304 on every
document. Changes are made with :meth:`TestSource.put` and :meth:`TestSource.delete`, which
return the change as a dict for :func:`tests.support.notification`.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from aiohttp import web

from resourcesync import format_datetime

NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)


class TestSource:
    __test__ = False

    def __init__(self, *, spec: str = "1.0", index: bool = True, page_size: int = 5) -> None:
        self.spec = spec
        self.index = index
        self.page_size = page_size
        self.files: dict[str, bytes] = {}
        self.lastmods: dict[str, datetime] = {}
        self.log: list[dict[str, Any]] = []
        self.url = ""
        #: name -> how many more GETs of that file answer 500.
        self.failing: dict[str, int] = {}
        self.requests: list[tuple[str, int]] = []
        self.served_bytes: dict[str, bytes] = {}  # name -> bytes served instead (corruption)
        #: name -> the ``rs:md`` attributes its Resource List entry gives instead of its
        #: hash and length (``{}``: neither; ``{"length": "5"}``: a length alone).
        self.listed_md: dict[str, dict[str, str]] = {}
        self._clock = datetime(2026, 1, 1, tzinfo=UTC)
        self._runner: web.AppRunner | None = None

    def _tick(self) -> datetime:
        now = datetime.now(UTC).replace(microsecond=0)
        self._clock = max(self._clock + timedelta(seconds=1), now)
        return self._clock

    def loc(self, name: str) -> str:
        return f"{self.url}/files/{name}"

    def put(self, name: str, data: bytes, *, when: datetime | None = None) -> dict[str, Any]:
        change = "updated" if name in self.files else "created"
        self.files[name] = data
        stamp = when or self._tick()
        self.lastmods[name] = stamp
        entry = {
            "loc": self.loc(name),
            "lastmod": format_datetime(stamp),
            "change": change,
            "hash": "md5:" + hashlib.md5(data).hexdigest(),
            "length": len(data),
        }
        self.log.append(entry)
        return entry

    def delete(self, name: str) -> dict[str, Any]:
        del self.files[name]
        del self.lastmods[name]
        entry = {
            "loc": self.loc(name),
            "lastmod": format_datetime(self._tick()),
            "change": "deleted",
        }
        self.log.append(entry)
        return entry

    async def start(self, port: int = 0) -> str:
        app = web.Application()
        app.middlewares.append(self._record)
        app.router.add_get("/files/{name:.+}", self._file)
        app.router.add_get("/.well-known/resourcesync", self._description)
        app.router.add_get("/capabilitylist.xml", self._capabilities)
        app.router.add_get("/resourcelist.xml", self._resources)
        app.router.add_get("/changelist.xml", self._changelist)
        app.router.add_get("/changelist/{n:[0-9]+}.xml", self._page)
        self.more_routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self.url

    def more_routes(self, app: web.Application) -> None:
        """Routes a subclass serves too (a Resource Dump, say)."""

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        resp = await handler(request)
        self.requests.append((request.path, resp.status))
        return resp

    async def _file(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in self.files:
            raise web.HTTPNotFound()
        if self.failing.get(name, 0) > 0:
            self.failing[name] -= 1
            raise web.HTTPInternalServerError()
        return web.Response(body=self.served_bytes.get(name, self.files[name]))

    def _xml(self, request: web.Request, body: str) -> web.Response:
        data = ('<?xml version="1.0" encoding="UTF-8"?>\n' + body).encode()
        etag = '"' + hashlib.sha256(data).hexdigest()[:20] + '"'
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers={"ETag": etag})
        return web.Response(body=data, content_type="application/xml", headers={"ETag": etag})

    async def _description(self, request: web.Request) -> web.Response:
        return self._xml(
            request,
            f'<urlset {NS}><rs:md capability="description"/>'
            f"<url><loc>{self.url}/capabilitylist.xml</loc>"
            '<rs:md capability="capabilitylist"/></url></urlset>',
        )

    async def _capabilities(self, request: web.Request) -> web.Response:
        return self._xml(
            request,
            f'<urlset {NS}><rs:ln rel="up" '
            f'href="{self.url}/.well-known/resourcesync"/>'
            '<rs:md capability="capabilitylist"/>'
            f"<url><loc>{self.url}/resourcelist.xml</loc>"
            '<rs:md capability="resourcelist"/></url>'
            f"<url><loc>{self.url}/changelist.xml</loc>"
            '<rs:md capability="changelist"/></url></urlset>',
        )

    async def _resources(self, request: web.Request) -> web.Response:
        at = format_datetime(datetime.now(UTC))
        urls = "".join(
            f"<url><loc>{escape(self.loc(n))}</loc>"
            f"<lastmod>{format_datetime(self.lastmods[n])}</lastmod>{self._listed_md(n, d)}</url>"
            for n, d in sorted(self.files.items())
        )
        return self._xml(
            request, f'<urlset {NS}><rs:md capability="resourcelist" at="{at}"/>{urls}</urlset>'
        )

    def _listed_md(self, name: str, data: bytes) -> str:
        attrs = self.listed_md.get(name)
        if attrs is None:
            attrs = {"hash": f"md5:{hashlib.md5(data).hexdigest()}", "length": str(len(data))}
        if not attrs:
            return ""
        return "<rs:md" + "".join(f" {k}={quoteattr(v)}" for k, v in attrs.items()) + "/>"

    def _up(self) -> str:
        return f'<rs:ln rel="up" href="{self.url}/capabilitylist.xml"/>'

    def _entries(self, changes: list[dict[str, Any]]) -> str:
        out = []
        for c in changes:
            attrs = f'change="{c["change"]}"'
            if self.spec == "1.1":
                attrs += f' datetime="{c["lastmod"]}"'
            for name in ("hash", "length"):
                if name in c:
                    attrs += f' {name}="{c[name]}"'
            lastmod = (
                ""
                if self.spec == "1.1" and c["change"] == "deleted"
                else (f"<lastmod>{c['lastmod']}</lastmod>")
            )
            out.append(f"<url><loc>{escape(c['loc'])}</loc>{lastmod}<rs:md {attrs}/></url>")
        return "".join(out)

    def _pages(self) -> list[list[dict[str, Any]]]:
        pages = [self.log[i : i + self.page_size] for i in range(0, len(self.log), self.page_size)]
        return pages or [[]]

    async def _changelist(self, request: web.Request) -> web.Response:
        start = "2025-01-01T00:00:00Z"
        if not self.index:
            return self._xml(
                request,
                f'<urlset {NS}>{self._up()}<rs:md capability="changelist" '
                f'from="{start}"/>{self._entries(self.log)}</urlset>',
            )
        pages = self._pages()
        items = []
        for i, page in enumerate(pages):
            frm = pages[i - 1][-1]["lastmod"] if i else start
            until = f' until="{page[-1]["lastmod"]}"' if i < len(pages) - 1 else ""
            items.append(
                f"<sitemap><loc>{self.url}/changelist/{i}.xml</loc>"
                f'<rs:md capability="changelist" from="{frm}"{until}/></sitemap>'
            )
        return self._xml(
            request,
            f'<sitemapindex {NS}>{self._up()}<rs:md capability="changelist"/>'
            + "".join(items)
            + "</sitemapindex>",
        )

    async def _page(self, request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        pages = self._pages()
        if n >= len(pages):
            raise web.HTTPNotFound()
        return self._xml(
            request,
            f'<urlset {NS}>{self._up()}<rs:md capability="changelist" '
            f'from="2025-01-01T00:00:00Z"/>{self._entries(pages[n])}</urlset>',
        )
