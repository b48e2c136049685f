"""HTTP caching of the served documents: validators, 304s, caching headers, gzip, streaming.

Every document gets a weak ``ETag`` (weak because the same document may go out gzipped or
not, RFC 9110 §8.8.1) and a ``Last-Modified``; a conditional GET that matches gets ``304 Not
Modified`` (``If-None-Match`` wins over ``If-Modified-Since``, RFC 9110 §13.2.2). Closed
Change List pages and Resource List snapshot pages never change and say so
(``Cache-Control: public, max-age=31536000, immutable``); everything else must be
revalidated (``no-cache``). Bodies are gzipped when the client accepts gzip, and written in
chunks as they are rendered, never built whole, except pages kept in :class:`ByteCache` and
documents too costly to render per request: those are built once per version, off the event
loop, and shared by every request for that version (:class:`Builds`).
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import re
from collections import OrderedDict
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime as http_date
from email.utils import parsedate_to_datetime

from aiohttp import web
from aiohttp.web_response import ContentCoding

from hub.core.exceptions import RequestError
from hub.core.rendering import CHARSET, MEDIA_TYPE, Rendered
from hub.core.tasks import Tasks

log = logging.getLogger(__name__)

XML = MEDIA_TYPE
#: A whole body is written in slices of this size, so one write never holds the loop long.
WRITE_SLICE = 256 * 1024
IMMUTABLE = "public, max-age=31536000, immutable"
REVALIDATE = "no-cache"


@dataclass(frozen=True, slots=True)
class Validators:
    """What identifies one version of a document."""

    #: Opaque version tag, without quotes or ``W/``.
    tag: str
    #: When that version last changed (ms since the epoch).
    modified_ms: int
    immutable: bool = False
    #: False while a newer version could share this one's Last-Modified second: then
    #: If-Modified-Since alone never answers 304 (ETags still do).
    settled: bool = True

    @property
    def etag(self) -> str:
        return f'W/"{self.tag}"'

    @property
    def last_modified(self) -> str:
        moment = datetime.fromtimestamp(self.modified_ms // 1000, tz=UTC)
        return http_date(moment, usegmt=True)


def _etag_matches(header: str, tag: str) -> bool:
    """Weak comparison of ``tag`` with an ``If-None-Match`` list (RFC 9110 §13.1.2)."""
    for item in header.split(","):
        item = item.strip()
        if item == "*":
            return True
        if item.startswith("W/"):
            item = item[2:]
        if item.strip('"') == tag:
            return True
    return False


def not_modified(request: web.Request, validators: Validators) -> bool:
    inm = request.headers.get("If-None-Match")
    if inm is not None:
        return _etag_matches(inm, validators.tag)
    ims = request.headers.get("If-Modified-Since")
    if ims is not None and (validators.immutable or validators.settled):
        try:
            since = parsedate_to_datetime(ims)
            if since.tzinfo is None:
                since = since.replace(tzinfo=UTC)
            seconds = int(since.timestamp())
        except (TypeError, ValueError, IndexError, OverflowError, OSError):
            return False  # not a date: as if the header were absent
        return validators.modified_ms // 1000 <= seconds
    return False


def unchanged(validators: Validators, headers: dict[str, str] | None = None) -> web.Response:
    """The 304 for a conditional request that :func:`not_modified` matched."""
    return web.Response(status=304, headers=_headers(validators, headers))


#: A weight (RFC 9110 §12.4.2): 0 to 1 with at most three decimals.
_QVALUE = re.compile(r"0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?")


def _weight(params: str) -> float | None:
    """A member's ``q`` (1 when it has none), or ``None`` when its ``q`` is malformed."""
    q = 1.0
    for param in params.split(";"):
        name, eq, value = param.partition("=")
        if name.strip().lower() == "q":
            value = value.strip()
            if not eq or not _QVALUE.fullmatch(value):
                return None
            q = float(value)
    return q


def accepts_gzip(request: web.Request) -> bool:
    """Whether ``Accept-Encoding`` lets gzip through (RFC 9110 §12.5.3); never raises.

    A member with a malformed weight (``gzip;q=abc``, ``q=2``) is ignored, as if absent:
    the hub then answers without gzip unless another member allows it. ``gzip`` (or
    ``x-gzip``) by name wins over ``*``; a weight of 0 refuses.
    """
    named: float | None = None
    star: float | None = None
    for member in request.headers.get("Accept-Encoding", "").split(","):
        coding, _, params = member.partition(";")
        coding = coding.strip().lower()
        if coding not in ("gzip", "x-gzip", "*"):
            continue
        q = _weight(params)
        if q is None:
            continue
        if coding == "*":
            star = q if star is None else max(star, q)
        else:
            named = q if named is None else max(named, q)
    q = named if named is not None else star
    return q is not None and q > 0


def _headers(validators: Validators, extra: dict[str, str] | None) -> dict[str, str]:
    headers = {
        "ETag": validators.etag,
        "Last-Modified": validators.last_modified,
        "Cache-Control": IMMUTABLE if validators.immutable else REVALIDATE,
        "Vary": "Accept-Encoding",
    }
    if extra:
        headers.update(extra)
    return headers


async def stream(
    request: web.Request,
    validators: Validators,
    body: AsyncIterable[bytes] | Iterable[bytes],
    *,
    headers: dict[str, str] | None = None,
) -> web.StreamResponse:
    """Answer with ``body`` chunk by chunk (gzipped on the fly if accepted), or a 304."""
    all_headers = _headers(validators, headers)
    if not_modified(request, validators):
        return web.Response(status=304, headers=all_headers)
    resp = web.StreamResponse(headers=all_headers)
    resp.content_type = XML
    resp.charset = CHARSET
    if request.method != "HEAD" and accepts_gzip(request):
        # (not for HEAD: aiohttp would still send the empty gzip stream's bytes)
        resp.enable_compression(ContentCoding.gzip)
    await resp.prepare(request)
    if request.method != "HEAD":
        if isinstance(body, AsyncIterable):
            async for chunk in body:
                await resp.write(chunk)
        else:
            for chunk in body:
                await resp.write(chunk)
    await resp.write_eof()
    return resp


class ByteCache:
    """A bounded LRU of rendered immutable documents, with their gzipped form made lazily."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0

    def clear(self) -> None:
        self._items.clear()
        self._size = 0

    def get(self, key: str) -> bytes | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: str, value: bytes) -> None:
        if len(value) > self.max_bytes:
            return
        old = self._items.pop(key, None)
        if old is not None:
            self._size -= len(old)
        self._items[key] = value
        self._size += len(value)
        while self._size > self.max_bytes:
            _, dropped = self._items.popitem(last=False)
            self._size -= len(dropped)

    async def gzipped(self, key: str, raw: bytes) -> bytes:
        gz = self.get(key + "|gz")
        if gz is None:
            gz = await asyncio.get_running_loop().run_in_executor(None, gzip.compress, raw, 6)
            self.put(key + "|gz", gz)
        return gz


async def send_bytes(
    request: web.Request,
    validators: Validators,
    raw: bytes,
    gzipped: Callable[[], Awaitable[bytes]],
    *,
    headers: dict[str, str] | None = None,
) -> web.StreamResponse:
    """Answer with a whole rendered body (its gzipped form if accepted), or a 304."""
    all_headers = _headers(validators, headers)
    if not_modified(request, validators):
        return web.Response(status=304, headers=all_headers)
    body = raw
    if accepts_gzip(request):
        body = await gzipped()
        all_headers["Content-Encoding"] = "gzip"
    resp = web.StreamResponse(headers=all_headers)
    resp.content_type = XML
    resp.charset = CHARSET
    resp.content_length = len(body)
    await resp.prepare(request)
    if request.method != "HEAD":
        view = memoryview(body)
        for start in range(0, len(body), WRITE_SLICE):
            await resp.write(view[start : start + WRITE_SLICE])
    await resp.write_eof()
    return resp


async def send_pieces(
    request: web.Request,
    validators: Validators,
    pieces: AsyncIterable[bytes | memoryview],
    *,
    gzipped: bool,
    length: int | None = None,
    headers: dict[str, str] | None = None,
) -> web.StreamResponse:
    """Answer with a body that is being built: each of its ``pieces`` written as it comes
    (already gzipped when ``gzipped``; in slices of :data:`WRITE_SLICE`); chunked unless the
    ``length`` is known. A piece that fails after the answer began cuts the connection (a
    chunked body without its end, a body short of its length): a client never takes a
    part for the whole. Before it, the error goes to the one error mapping."""
    all_headers = _headers(validators, headers)
    if gzipped:
        all_headers["Content-Encoding"] = "gzip"
    resp = web.StreamResponse(headers=all_headers)
    resp.content_type = XML
    resp.charset = CHARSET
    if length is not None:
        resp.content_length = length
    iterator = aiter(pieces)
    try:
        first = await anext(iterator)
    except StopAsyncIteration:
        first = b""
    await resp.prepare(request)

    async def write(piece: bytes | memoryview) -> None:
        view = memoryview(piece)
        for start in range(0, len(view), WRITE_SLICE):
            await resp.write(view[start : start + WRITE_SLICE])

    try:
        await write(first)
        async for piece in iterator:
            await write(piece)
    except ConnectionError:
        raise
    except Exception as exc:
        # Said once, without a traceback: a page withdrawn while it was sent is routine
        # (retention), anything else (damaged data, Redis away) the operator should hear of.
        level = logging.INFO if isinstance(exc, RequestError) else logging.WARNING
        log.log(level, "%s %r cut after its first bytes: %r", request.method, request.path, exc)
        transport = request.transport
        if transport is not None:
            transport.abort()
        raise ConnectionResetError(f"the answer was cut: {exc}") from exc
    await resp.write_eof()
    return resp


async def send_cached(
    request: web.Request,
    validators: Validators,
    cache: ByteCache,
    key: str,
    raw: bytes,
    *,
    headers: dict[str, str] | None = None,
) -> web.StreamResponse:
    """Answer with a cached rendering (its gzipped form if accepted), or a 304."""

    async def gzipped() -> bytes:
        return await cache.gzipped(key, raw)

    return await send_bytes(request, validators, raw, gzipped, headers=headers)


async def send_rendered(
    request: web.Request,
    validators: Validators,
    rendered: Rendered,
    *,
    headers: dict[str, str] | None = None,
) -> web.StreamResponse:
    """Answer with a document built by :class:`Builds`, or a 304."""

    async def gzipped() -> bytes:
        return rendered.gz

    return await send_bytes(request, validators, rendered.raw, gzipped, headers=headers)


#: Keys :class:`Builds` remembers as too big to keep (the oldest forgotten first).
_UNKEPT_KEYS = 4096


class Builds:
    """The newest rendering of each document, built once per version however many ask.

    Concurrent requests for a version that is not built yet share one build (single
    flight); it runs as its own task in ``tasks`` (the runtime's, so a stop ends it), and a
    reader that goes away does not cancel it for the others. A reader may bound its wait
    (``wait``): past it, it gets the rendering kept of an earlier version while the build
    goes on (a document too big to keep is waited for whole). A finished build is kept
    (least recently used first out, ``max_bytes`` in all) until a request finds a newer
    version. A build that fails is not kept: every waiter sees its error, and the next
    request tries again.
    """

    def __init__(self, max_bytes: int, tasks: Tasks) -> None:
        self.max_bytes = max_bytes
        self.tasks = tasks
        #: How many builds ran (for tests and metrics: one per version, not per request).
        self.built = 0
        self._done: OrderedDict[str, tuple[str, Rendered]] = OrderedDict()
        self._size = 0
        self._running: dict[tuple[str, str], asyncio.Task[Rendered | None]] = {}
        #: Documents whose last rendering was too big to keep: their readers wait for it.
        self._unkept: OrderedDict[str, None] = OrderedDict()

    def clear(self) -> None:
        self._done.clear()
        self._size = 0

    def cached(self, key: str, version: str) -> Rendered | None:
        found = self._done.get(key)
        if found is None or found[0] != version:
            return None
        self._done.move_to_end(key)
        return found[1]

    async def get(
        self,
        key: str,
        version: str,
        build: Callable[[], Awaitable[Rendered | None]],
        version_of: Callable[[Rendered], str] | None = None,
        *,
        keep: bool = True,
        wait: float | None = None,
    ) -> Rendered | None:
        """The rendering of ``key`` at ``version`` (or newer: a build reads the present).

        ``version_of`` says which version a finished build holds (default: ``version``);
        ``None`` from ``build`` means there is nothing to keep (the caller serves another
        way). ``keep=False``: share the build, but leave keeping it to the caller.
        ``wait``: the longest to wait for the build; then the kept rendering of an earlier
        version, or ``TimeoutError`` when none is kept (the build goes on either way).
        """
        found = self.cached(key, version)
        if found is not None:
            return found
        task = self._running.get((key, version))
        if task is None:
            task = self.tasks.spawn(
                f"build {key}",
                self._build(key, build, version_of or (lambda _: version), keep),
                on_end=lambda done: self._finished(key, version, done),
            )
            self._running[(key, version)] = task
        if wait is None:
            return await asyncio.shield(task)
        await asyncio.wait([task], timeout=wait)
        if task.done():
            return task.result()
        earlier = self._done.get(key)
        if earlier is None:
            if key in self._unkept:  # too big to keep: no later reader could be served
                return await asyncio.shield(task)  # from a build it did not wait for
            raise TimeoutError(f"{key} is being built")
        self._done.move_to_end(key)
        return earlier[1]

    def _finished(self, key: str, version: str, done: asyncio.Task[Rendered | None]) -> None:
        self._running.pop((key, version), None)
        if not done.cancelled():
            done.exception()  # retrieved here, whether or not a waiter is left

    async def _build(
        self,
        key: str,
        build: Callable[[], Awaitable[Rendered | None]],
        version_of: Callable[[Rendered], str],
        keep: bool,
    ) -> Rendered | None:
        result = await build()
        self.built += 1
        if result is not None and keep:
            self._keep(key, version_of(result), result)
        return result

    def _keep(self, key: str, version: str, value: Rendered) -> None:
        old = self._done.pop(key, None)
        if old is not None:
            self._size -= old[1].nbytes
        if value.nbytes > self.max_bytes:
            self._unkept[key] = None
            while len(self._unkept) > _UNKEPT_KEYS:
                self._unkept.popitem(last=False)
            return
        self._unkept.pop(key, None)
        self._done[key] = (version, value)
        self._size += value.nbytes
        while self._size > self.max_bytes:
            _, (_, dropped) = self._done.popitem(last=False)
            self._size -= dropped.nbytes
