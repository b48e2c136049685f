"""A page of another site than the hub's, for the tests a real browser plays: one HTML page
served at ``/`` by a tiny server on its own port of 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from tests.support import free_port


class PageSite:
    """Serves ``page`` at ``/``. ``origin`` names the site under ``host``: 127.0.0.1, or a
    name the browser maps to it (``--host-resolver-rules``), as another site's DNS would."""

    def __init__(self, page: str, *, host: str = "127.0.0.1") -> None:
        self.page = page
        self.port = free_port()
        self.origin = f"http://{host}:{self.port}"
        self._runner: web.AppRunner | None = None

    async def _page(self, _request: web.Request) -> web.Response:
        return web.Response(text=self.page, content_type="text/html")

    async def start(self) -> PageSite:
        app = web.Application()
        app.router.add_get("/", self._page)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()


@asynccontextmanager
async def page_site(page: str, *, host: str = "127.0.0.1") -> AsyncIterator[PageSite]:
    """A started :class:`PageSite`, stopped on leaving."""
    site = await PageSite(page, host=host).start()
    try:
        yield site
    finally:
        await site.stop()
