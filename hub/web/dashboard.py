"""Pages for people and the interface description: the dashboard, ``/openapi.json``, ``/docs``.

The dashboard is static HTML+JS shipped in the package (``hub/web/static/``, no build step);
it reads ``/admin/overview.json`` and ``/healthz`` and tails a topic over SSE. Behind tokens
it asks for the operator token and sends it only as ``Authorization: Bearer``.
"""

from __future__ import annotations

import asyncio
from functools import cache
from importlib import resources

import orjson
from aiohttp import web

from hub.core import openapi
from hub.core.exceptions import NotFound

_ASSETS = {
    "dashboard.js": "text/javascript",
    "dashboard.css": "text/css",
}
#: Pages that load nothing from elsewhere, and say so to the browser.
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'"
)


@cache
def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


async def dashboard(request: web.Request) -> web.Response:
    return web.Response(
        body=_asset("index.html"),
        content_type="text/html",
        charset="utf-8",
        headers={"Content-Security-Policy": _CSP, "Cache-Control": "no-cache"},
    )


async def dashboard_asset(request: web.Request) -> web.Response:
    name = request.match_info["file"]
    if name not in _ASSETS:
        raise NotFound(f"no dashboard file {name[:80]!r}")
    return web.Response(
        body=_asset(name), content_type=_ASSETS[name], headers={"Cache-Control": "no-cache"}
    )


class InterfaceDescription:
    """``/openapi.json`` and ``/docs``, for the hub at ``public_url`` (handlers are its
    bound methods).

    The document is made once, on the first request, in a thread: generating its schemas
    from the models takes pydantic about 0.1 s, which the event loop's other clients would
    otherwise wait for."""

    def __init__(self, public_url: str) -> None:
        self.public_url = public_url
        self._made: tuple[bytes, str] | None = None

    def _make(self) -> tuple[bytes, str]:
        document = openapi.spec(self.public_url + "/")
        return orjson.dumps(document), openapi.render_html(document)

    async def _document(self) -> tuple[bytes, str]:
        if self._made is None:  # two first requests at once make it twice: both the same
            self._made = await asyncio.to_thread(self._make)
        return self._made

    async def openapi_json(self, request: web.Request) -> web.Response:
        body, _ = await self._document()
        return web.Response(body=body, content_type="application/json")

    async def docs_page(self, request: web.Request) -> web.Response:
        _, page = await self._document()
        return web.Response(
            text=page, content_type="text/html", headers={"Content-Security-Policy": _CSP}
        )
