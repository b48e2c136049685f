"""Pages for people and the interface description: the dashboard, ``/openapi.json``, ``/docs``.

The dashboard is static HTML+JS shipped in the package (``hub/web/static/``, no build step);
it reads ``/admin/overview.json`` and ``/healthz`` and tails a topic over SSE. Behind tokens
it asks for the operator token and sends it only as ``Authorization: Bearer``.
"""

from __future__ import annotations

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
    bound methods)."""

    def __init__(self, public_url: str) -> None:
        self.public_url = public_url

    def _spec(self) -> dict[str, object]:
        return openapi.spec(self.public_url + "/")

    async def openapi_json(self, request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(self._spec()), content_type="application/json")

    async def docs_page(self, request: web.Request) -> web.Response:
        return web.Response(
            text=openapi.render_html(self._spec()),
            content_type="text/html",
            headers={"Content-Security-Policy": _CSP},
        )
