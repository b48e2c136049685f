"""Change Lists (Z39.99 §12): the index, its pages, and the topic URI serving the open page.

Entries are in event-id (receipt) order; see :mod:`hub.rendering` for what each entry says
and :mod:`hub.pages` for where pages begin and end. A page is read from the stream in
batches and written out as it is rendered. It is only ever served whole: a page whose first
event was trimmed is not served (404), and if trimming overtakes a page while it is being
sent, the connection is cut rather than the page finished short.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from redis.asyncio import Redis

from . import keys, rendering, replies
from .discovery import DocumentUrls, known_topic, urls
from .exceptions import NotFound
from .http_cache import ByteCache, Validators, not_modified, send_cached, stream
from .links import format_links
from .pages import Chain, Page, PageChain
from .state import REDIS

PAGES = web.AppKey("pages", PageChain)
DOC_CACHE = web.AppKey("doc_cache", ByteCache)

#: Events read from Redis per round trip while a page is rendered.
READ_BATCH = 5000
#: An index lists at most this many pages (Sitemaps limit): the newest ones.
MAX_INDEX_ENTRIES = 50_000


class PageTrimmed(ConnectionResetError):
    """Retention trimmed a page while it was being sent; the response is aborted."""


def page_number(text: str) -> int:
    if not text.isdigit() or len(text) > 12 or int(text) < 1:
        raise NotFound(f"no Change List page {text!r}: pages are numbered 1, 2, 3, ...")
    return int(text)


def _validators(u: DocumentUrls, topic: str, page: Page, now_ms: int) -> Validators:
    state = "c" if page.closed else f"o{page.count}"
    tag = f"{u.tag}-cl-{topic}-{page.n}-{page.first}-{page.last}-{state}"
    modified = page.until_ms if page.until_ms is not None else page.last_ms
    # A version newer than one second cannot be told apart by Last-Modified: mark it so
    # that If-Modified-Since alone never yields a wrong 304 (see http_cache).
    return Validators(tag, modified, immutable=page.closed, settled=modified < now_ms - 1000)


def _head(u: DocumentUrls, topic: str, page: Page) -> str:
    links = [("up", u.capabilitylist(topic)), ("index", u.changelist_index(topic))]
    return rendering.CHANGES_OPEN + rendering.root(
        "changelist", links, from_=page.from_ms, until=page.until_ms
    )


async def _first_batch(redis: Redis, topic: str, page: Page) -> list[Any]:
    if page.first is None or page.last is None:
        return []
    rows = await redis.xrange(
        keys.events(topic), page.first, page.last, count=min(READ_BATCH, page.count)
    )
    if replies.first_id(rows) != page.first:
        raise NotFound(
            f"Change List page {page.n} of {topic!r} was withdrawn: retention trimmed it",
            topic=topic,
            page=page.n,
        )
    return list(rows or [])


async def _body(
    redis: Redis,
    topic: str,
    page: Page,
    head: str,
    rows: list[Any],
    keep: list[bytes] | None,
) -> AsyncIterator[bytes]:
    field = keys.EVENT_FIELD
    floor = page.from_ms
    sent = 0
    parts: list[str] = [head]
    while rows:
        for eid, fields in rows:
            parts.append(rendering.change_entry(eid.decode(), fields[field], floor))
        sent += len(rows)
        chunk = "".join(parts).encode()
        parts = []
        if keep is not None:
            keep.append(chunk)
        yield chunk
        if sent >= page.count:
            break
        last = replies.text(rows[-1][0])
        rows = list(
            await redis.xrange(
                keys.events(topic),
                f"({last}",
                page.last or "+",
                count=min(READ_BATCH, page.count - sent),
            )
            or []
        )
    if page.first is not None:
        still = await redis.xrange(keys.events(topic), page.first, page.first, count=1)
        if sent != page.count or not still:
            raise PageTrimmed(f"page {page.n} of {topic!r} was trimmed while being sent")
    tail = (("".join(parts)) + rendering.URLSET_CLOSE).encode()
    if keep is not None:
        keep.append(tail)
    yield tail


async def serve_page(
    request: web.Request,
    topic: str,
    chain: Chain,
    page: Page,
    headers: dict[str, str] | None = None,
) -> web.StreamResponse:
    u = urls(request)
    validators = _validators(u, topic, page, chain.now_ms)
    cache = request.app[DOC_CACHE]
    if page.closed:
        cached = cache.get(validators.tag)
        if cached is not None:
            return await send_cached(
                request, validators, cache, validators.tag, cached, headers=headers
            )
    redis = request.app[REDIS]
    if request.method == "HEAD" or not_modified(request, validators):
        rows = []  # stream() answers 304 / headers only: nothing to read
    else:
        rows = await _first_batch(redis, topic, page)
    keep: list[bytes] | None = [] if page.closed else None
    body = _body(redis, topic, page, _head(u, topic, page), rows, keep)
    resp = await stream(request, validators, body, headers=headers)
    if keep and resp.status == 200:
        cache.put(validators.tag, b"".join(keep))
    return resp


async def changelist_page(request: web.Request) -> web.StreamResponse:
    topic = await known_topic(request)
    n = page_number(request.match_info["page"])
    chain, page = await request.app[PAGES].page(topic, n)
    if page is None:
        first = chain.closed[0].n if chain.closed else chain.open.n
        why = "it was withdrawn after retention trimmed it" if n < first else "it does not exist"
        raise NotFound(
            f"no Change List page {n} for topic {topic!r}: {why}; "
            f"see {urls(request).changelist_index(topic)}",
            topic=topic,
            page=n,
        )
    return await serve_page(request, topic, chain, page)


async def topic_uri(request: web.Request) -> web.StreamResponse:
    """``GET /topics/{name}``: the open Change List page, with WebSub discovery links."""
    topic = await known_topic(request)
    chain = await request.app[PAGES].advance(topic)
    u = urls(request)
    headers = {
        "Link": format_links(u.hub, u.topic(topic)),
        "Content-Location": u.changelist_page(topic, chain.open.n),
    }
    return await serve_page(request, topic, chain, chain.open, headers)


async def changelist_index(request: web.Request) -> web.StreamResponse:
    topic = await known_topic(request)
    chain = await request.app[PAGES].advance(topic, "all")
    u = urls(request)
    closed = sorted(chain.closed, key=lambda p: p.n)[-(MAX_INDEX_ENTRIES - 1) :]
    listed = [*closed, chain.open]
    opened = chain.open
    tag = f"{u.tag}-cli-{topic}-{listed[0].n}-{opened.n}-{opened.first}-{opened.last}"
    modified = max(opened.last_ms, closed[-1].until_ms or 0) if closed else opened.last_ms
    validators = Validators(tag, modified, settled=modified < chain.now_ms - 1000)
    parts = [
        rendering.INDEX_OPEN,
        rendering.root("changelist", [("up", u.capabilitylist(topic))], from_=listed[0].from_ms),
    ]
    parts.extend(
        rendering.index_entry(u.changelist_page(topic, p.n), from_=p.from_ms, until=p.until_ms)
        for p in listed
    )
    parts.append(rendering.INDEX_CLOSE)
    return await stream(request, validators, rendering.chunked(parts))
