"""The Source on aiohttp: its documents and its files.

Documents are built in a thread from a copy of what the Source knows, once per version of
it (a closed Change List page once for all), and answered with an ``ETag`` (``304`` to a
matching ``If-None-Match``).

Files: ``/files/KEY`` serves only a resource the Source lists. The request's path is
percent-decoded once and spelled as a key, so ``..``, ``%2e%2e``, an encoded ``/`` or a
NUL name nothing the Source lists; the file is then opened from the directory one
component at a time without following links (:func:`source.tree.open_resource`), so a
directory swapped for a link after the scan is refused too. The open descriptor is handed
to aiohttp's ``FileResponse`` through ``/proc/self/fd`` (Linux): the bytes are streamed
(``sendfile``), never read whole, from the very file that was checked, even if it is
deleted or replaced meanwhile; and aiohttp finds no ``.gz``/``.br`` sibling beside such a
path, which it would otherwise serve, with ``Content-Encoding``, in place of the file to a
client that accepts it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

from resourcesync.package_writer import PACKAGE_TYPE

from .documents import FILES_PREFIX, Site
from .dumps import Dumps, DumpUnavailable
from .exceptions import NotAResource
from .runtime import SourceRuntime
from .tree import key_from_url_path, media_type, open_resource

__all__ = ["SOURCE", "create_app"]

SOURCE = web.AppKey("source", SourceRuntime)
_XML = "application/xml"
_PAGE = r"{page:[0-9]{8}}.xml"


@dataclass(frozen=True, slots=True)
class _Built:
    body: bytes
    etag: str


def _built(body: bytes) -> _Built:
    return _Built(body, f'"{hashlib.md5(body).hexdigest()}"')


class _Documents:
    """Each document built once per version of the inventory, off the loop."""

    def __init__(self, runtime: SourceRuntime) -> None:
        self.runtime = runtime
        self.site: Site = runtime.site
        self._cache: dict[tuple[str, int], asyncio.Future[_Built | None]] = {}

    async def get(
        self, name: str, version: int, build: Callable[[], bytes | None]
    ) -> _Built | None:
        key = (name, version)
        future = self._cache.get(key)
        if future is None:
            # Documents of an older version are dropped (closed pages use version -1).
            for old in [k for k in self._cache if k[0] == name and k[1] != version]:
                del self._cache[old]
            future = asyncio.ensure_future(asyncio.to_thread(self._build, build))
            self._cache[key] = future
        try:
            return await asyncio.shield(future)
        except Exception:
            self._cache.pop(key, None)
            raise

    @staticmethod
    def _build(build: Callable[[], bytes | None]) -> _Built | None:
        body = build()
        return None if body is None else _built(body)

    async def resource_list(self, page: int | None) -> _Built | None:
        inventory = self.runtime.inventory
        at = datetime.now(UTC)
        files = inventory.files  # replaced on change, never changed in place: a thread reads it

        def build() -> bytes | None:
            ordered = sorted(files.items())
            if page is None:
                return self.site.resource_list(ordered, at)
            if self.site.resourcelist_pages(len(ordered)) < 2:
                return None  # one list, no pages
            if page >= self.site.resourcelist_pages(len(ordered)):
                return None
            return self.site.resource_list_page(ordered, page, at)

        name = "resourcelist" if page is None else f"resourcelist/{page}"
        return await self.get(name, inventory.version, build)

    async def change_list_index(self) -> _Built | None:
        inventory = self.runtime.inventory
        history, started = inventory.history[:], inventory.started
        return await self.get(
            "changelist",
            len(history),
            lambda: self.site.change_list_index(history, started),
        )

    async def latest_changes(self) -> _Built | None:
        inventory = self.runtime.inventory
        history, started = inventory.history[:], inventory.started
        return await self.get(
            "changes", len(history), lambda: self.site.latest_changes(history, started)
        )

    async def change_list_page(self, page: int) -> _Built | None:
        inventory = self.runtime.inventory
        history, started = inventory.history[:], inventory.started
        closed = len(history) >= (page + 1) * self.site.changelist_entries
        return await self.get(
            f"changelist/{page}",
            -1 if closed else len(history),
            lambda: self.site.change_list_page(history, page, started),
        )


_DOCUMENTS = web.AppKey("documents", _Documents)


async def _ready(request: web.Request) -> SourceRuntime:
    """The runtime, once its first scan is recorded: until then the lists are incomplete."""
    runtime = request.app[SOURCE]
    await runtime.ready.wait()
    return runtime


def _answer(request: web.Request, built: _Built | None) -> web.StreamResponse:
    if built is None:
        raise web.HTTPNotFound(text="no such document\n")
    headers = {"ETag": built.etag, "Cache-Control": "no-cache"}
    if built.etag in request.headers.get("If-None-Match", ""):
        return web.Response(status=304, headers=headers)
    return web.Response(body=built.body, content_type=_XML, headers=headers)


def _page(request: web.Request) -> int:
    return int(request.match_info["page"])


async def _description(request: web.Request) -> web.StreamResponse:
    site = request.app[SOURCE].site
    return _answer(request, _built(site.source_description()))


async def _capability_list(request: web.Request) -> web.StreamResponse:
    runtime = request.app[SOURCE]
    return _answer(request, _built(runtime.site.capability_list(dumps=runtime.dumps is not None)))


async def _resource_list(request: web.Request) -> web.StreamResponse:
    await _ready(request)
    return _answer(request, await request.app[_DOCUMENTS].resource_list(None))


async def _resource_list_page(request: web.Request) -> web.StreamResponse:
    await _ready(request)
    return _answer(request, await request.app[_DOCUMENTS].resource_list(_page(request)))


async def _change_list_index(request: web.Request) -> web.StreamResponse:
    await _ready(request)
    return _answer(request, await request.app[_DOCUMENTS].change_list_index())


async def _change_list_page(request: web.Request) -> web.StreamResponse:
    await _ready(request)
    return _answer(request, await request.app[_DOCUMENTS].change_list_page(_page(request)))


async def _latest_changes(request: web.Request) -> web.StreamResponse:
    await _ready(request)
    return _answer(request, await request.app[_DOCUMENTS].latest_changes())


def _dumps(runtime: SourceRuntime) -> Dumps:
    if runtime.dumps is None:
        raise web.HTTPNotFound(text="this Source serves no dumps\n")
    return runtime.dumps


async def _resource_dump(request: web.Request) -> web.StreamResponse:
    dumps = _dumps(await _ready(request))
    try:
        body = await dumps.resource_dump()
    except DumpUnavailable as exc:
        raise web.HTTPServiceUnavailable(text=f"{exc}\n", headers={"Retry-After": "5"}) from None
    return _answer(request, _built(body))


async def _change_dump(request: web.Request) -> web.StreamResponse:
    dumps = _dumps(await _ready(request))
    return _answer(request, _built(dumps.change_dump_document()))


async def _dump_file(request: web.Request, path: Path | None, kind: str) -> web.StreamResponse:
    if path is None:
        raise web.HTTPNotFound(text="no such package\n")
    try:
        fd = await asyncio.to_thread(os.open, path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        raise web.HTTPNotFound(text="no such package\n") from None
    response = _OpenFileResponse(fd, kind)
    await response.prepare(request)
    if response.status in (200, 206) and kind == PACKAGE_TYPE:
        request.app[SOURCE].packages_served += 1
    return response


def _dump_part(request: web.Request) -> tuple[int, bool]:
    return int(request.match_info["n"]), request.match_info["kind"] == ".manifest.xml"


async def _resource_dump_file(request: web.Request) -> web.StreamResponse:
    dumps = _dumps(await _ready(request))
    n, manifest = _dump_part(request)
    path = dumps.resourcedump_file(int(request.match_info["build"]), n, manifest)
    return await _dump_file(request, path, _XML if manifest else PACKAGE_TYPE)


async def _change_dump_file(request: web.Request) -> web.StreamResponse:
    dumps = _dumps(await _ready(request))
    n, manifest = _dump_part(request)
    return await _dump_file(
        request, dumps.changedump_file(n, manifest), _XML if manifest else PACKAGE_TYPE
    )


async def _file(request: web.Request) -> web.StreamResponse:
    runtime = await _ready(request)
    raw = request.rel_url.raw_path
    key = key_from_url_path(raw[len(FILES_PREFIX) :]) if raw.startswith(FILES_PREFIX) else None
    if key is None or key not in runtime.inventory.files:
        raise web.HTTPNotFound(text="no such resource\n")
    try:
        fd, _st = await asyncio.to_thread(open_resource, runtime.root, key)
    except NotAResource:
        raise web.HTTPNotFound(text="no such resource\n") from None
    response = _OpenFileResponse(fd, media_type(key))
    await response.prepare(request)
    if response.status in (200, 206):
        runtime.files_served += 1
    return response


class _OpenFileResponse(web.FileResponse):
    """aiohttp's ``FileResponse`` of a descriptor already open (see the module's
    docstring), closed once the response is sent. The handler prepares it itself, so the
    descriptor is closed even when the client is gone; aiohttp's own later ``prepare``
    finds the file sent and does nothing (``FileResponse`` would open the path again, and
    the number may name another file by then)."""

    def __init__(self, fd: int, content_type: str) -> None:
        super().__init__(f"/proc/self/fd/{fd}", headers={"Content-Type": content_type})
        self._fd: int | None = fd

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        fd = self._fd
        if fd is None:
            return None
        try:
            return await super().prepare(request)
        finally:
            self._fd = None
            os.close(fd)


def create_app(runtime: SourceRuntime) -> web.Application:
    """The Source's application; the runtime is started and closed with it."""
    app = web.Application()
    app[SOURCE] = runtime
    app[_DOCUMENTS] = _Documents(runtime)
    app.router.add_get("/.well-known/resourcesync", _description)
    app.router.add_get("/capabilitylist.xml", _capability_list)
    app.router.add_get("/resourcelist.xml", _resource_list)
    app.router.add_get(f"/resourcelist/{_PAGE}", _resource_list_page)
    app.router.add_get("/changelist.xml", _change_list_index)
    app.router.add_get(f"/changelist/{_PAGE}", _change_list_page)
    app.router.add_get("/changes.xml", _latest_changes)
    part = r"{n:[0-9]{8}}{kind:\.zip|\.manifest\.xml}"
    app.router.add_get("/resourcedump.xml", _resource_dump)
    app.router.add_get(r"/resourcedump/{build:[0-9]{1,18}}/" + part, _resource_dump_file)
    app.router.add_get("/changedump.xml", _change_dump)
    app.router.add_get("/changedump/" + part, _change_dump_file)
    app.router.add_get(FILES_PREFIX + "{key:.+}", _file)
    return app
