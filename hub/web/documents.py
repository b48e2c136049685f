"""The materialized ResourceSync documents, served for polling Destinations.

=============================================  =============================================
``GET /.well-known/resourcesync``              Source Description (Z39.99 §6.3, §8)
``GET /topics/{name}``                         the open Change List page, WebSub ``Link``\\ s
``GET /topics/{name}/capabilitylist.xml``      Capability List (§9)
``GET /topics/{name}/changelist.xml``          Change List Index (§12)
``GET /topics/{name}/changelist/{n}.xml``      one Change List page
``GET /topics/{name}/resourcelist.xml``        Resource List or its index (§10)
``GET /topics/{name}/resourcelist/{p}.xml``    one page of a Resource List snapshot
=============================================  =============================================

Every route also answers ``HEAD``. A topic's Capability List names its Resource List, its
Change List index and its ``changelist-notification`` channel (which carries the topic's
``changedump-notification`` publishes too): ``loc`` = the topic URI, ``rs:ln rel="hub"`` =
the hub URL (push spec §5); and the Resource Dump and Change Dump its Source declared
(:mod:`hub.core.dump_links`), each loc once.

Change List entries are in event-id (receipt) order; :mod:`hub.core.rendering` says what each
entry carries and :mod:`hub.store.pages` where pages begin and end. A page is built by a task
of its own, read from the stream in batches and rendered in the parse pool
(:mod:`hub.live.parsing`), once per version however many ask at once, and sent as it is
built (:mod:`hub.web.page_builds`): a 50,000-entry page neither holds the event loop nor
keeps its reader waiting for its first byte; the open page's next version reads and renders
only what was published since. A page is only ever served whole: a page whose first event
was trimmed before it is read is not served (404); while it is sent, its connection is cut.
The Resource List is built once per topic version, off the event loop; above
``resourcelist_page_entries`` it is an index over the pages of a snapshot kept in Redis,
and a reader gets the last snapshot at once while the next is taken in the background
(:mod:`hub.live.snapshot_builds`). No Resource List reader waits longer than
``document_wait_seconds`` for a build: past it, the earlier version, or, when there is none
yet, 503 with ``Retry-After``.
User documentation: ``docs/polling.md``.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import zlib
from dataclasses import dataclass

from aiohttp import web

from hub.core import rendering
from hub.core.events import id_ms
from hub.core.exceptions import NotFound, SnapshotPending
from hub.core.rendering import Rendered
from hub.core.topics import HubUrls, check_name
from hub.live.parsing import DocumentParser
from hub.live.snapshot_builds import SnapshotBuilds
from hub.store import dump_links
from hub.store.event_store import EventStore
from hub.store.pages import Chain, Page, PageChain
from hub.store.snapshots import ResourceSnapshots
from hub.web.access import check_read, link_urls, readable
from hub.web.cache import (
    Builds,
    ByteCache,
    Validators,
    accepts_gzip,
    not_modified,
    send_cached,
    send_pieces,
    send_rendered,
    stream,
    unchanged,
)
from hub.web.page_builds import PageBuilds


@dataclass(frozen=True, slots=True)
class Reading:
    """What serving documents needs: the store, page chains, snapshots, the parser's pool
    (builds run off the loop), and the document caches."""

    urls: HubUrls
    store: EventStore
    pages: PageChain
    snapshots: ResourceSnapshots
    #: Paged snapshots, taken in the background while the last one is served.
    snapshot_builds: SnapshotBuilds
    parser: DocumentParser
    doc_cache: ByteCache
    #: Whole Resource Lists, built once per version off the event loop (single flight).
    builds: Builds
    #: Change List pages, built off the serving path and sent as they are built.
    page_builds: PageBuilds


READING = web.AppKey("reading", Reading)

#: An index lists at most this many pages (Sitemaps limit): the newest ones.
MAX_INDEX_ENTRIES = 50_000


async def known_topic(request: web.Request) -> str:
    """The path's topic name, or 404 when nothing was ever published to it.

    A private topic needs a read token first (401/403), so its existence is not revealed.
    """
    name = check_name(request.match_info["name"])
    check_read(request, name)
    if not await request.app[READING].store.exists(name):
        raise NotFound(f"unknown topic {name!r}: nothing was ever published to it", topic=name)
    return name


# -- discovery ------------------------------------------------------------------------------


async def source_description(request: web.Request) -> web.StreamResponse:
    u, store = link_urls(request), request.app[READING].store
    names = readable(request, await store.topics())
    created = await store.created_ms(names)
    digest = hashlib.blake2b("\n".join(names).encode(), digest_size=8).hexdigest()
    validators = Validators(f"{u.tag}-sd-{len(names)}-{digest}", max(created, default=0))
    parts = [rendering.URLSET_OPEN, rendering.root("description", [])]
    parts.extend(rendering.capability_entry(u.capabilitylist(n), "capabilitylist") for n in names)
    parts.append(rendering.URLSET_CLOSE)
    return await stream(request, validators, rendering.chunked(parts))


async def capability_list(request: web.Request) -> web.StreamResponse:
    topic = await known_topic(request)
    u = link_urls(request)
    store = request.app[READING].store
    # Each loc once (resync keys a Capability List by loc): a declared dump never takes the
    # place of the hub's own documents, nor of the other declared dump.
    own = {u.resourcelist(topic), u.changelist_index(topic), u.topic(topic)}
    dumps = {}
    for rel, href in (await dump_links.declared(store.redis, topic)).items():
        if href not in own:
            own.add(href)
            dumps[rel] = href
    body = (
        rendering.URLSET_OPEN
        + rendering.root("capabilitylist", [("up", u.source_description)])
        + rendering.capability_entry(u.resourcelist(topic), "resourcelist")
        + rendering.capability_entry(u.changelist_index(topic), "changelist")
        + rendering.capability_entry(u.topic(topic), "changelist-notification", [("hub", u.hub)])
        + "".join(rendering.capability_entry(href, rel) for rel, href in dumps.items())
        + rendering.URLSET_CLOSE
    )
    created = (await store.facts(topic)).created_ms
    declared = hashlib.blake2b(repr(dumps).encode(), digest_size=6).hexdigest()
    validators = Validators(f"{u.tag}-cap-{topic}-{declared}", created)
    return await stream(request, validators, [body.encode()])


# -- Change Lists ---------------------------------------------------------------------------


def page_number(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 12 or int(text) < 1:
        raise NotFound(f"no Change List page {text!r}: pages are numbered 1, 2, 3, ...")
    return int(text)


def _page_validators(u: HubUrls, topic: str, page: Page, now_ms: int) -> Validators:
    state = "c" if page.closed else f"o{page.count}"
    tag = f"{u.tag}-cl-{topic}-{page.n}-{page.first}-{page.last}-{state}"
    modified = page.until_ms if page.until_ms is not None else page.last_ms
    # A version newer than one second cannot be told apart by Last-Modified: mark it so
    # that If-Modified-Since alone never yields a wrong 304 (see web_cache).
    return Validators(tag, modified, immutable=page.closed, settled=modified < now_ms - 1000)


def _page_head(u: HubUrls, topic: str, page: Page) -> str:
    links = [("up", u.capabilitylist(topic)), ("index", u.changelist_index(topic))]
    return rendering.RSHUB_URLSET_OPEN + rendering.root(
        "changelist", links, from_=page.from_ms, until=page.until_ms
    )


async def _stored_page(reading: Reading, topic: str, page: Page, tag: str) -> bytes | None:
    """A closed page some process built and kept in Redis (then in this one's cache too)."""
    gz = await reading.page_builds.stored.get(topic, page.n, tag)
    if gz is None:
        return None
    try:  # zlib releases the GIL: a thread will do
        raw = await asyncio.to_thread(gzip.decompress, gz)
    except (OSError, EOFError, zlib.error):  # not what the hub stored: build it again
        return None
    reading.doc_cache.put(tag, raw)
    reading.doc_cache.put(tag + "|gz", gz)
    return raw


async def _serve_page(
    request: web.Request,
    topic: str,
    chain: Chain,
    page: Page,
    headers: dict[str, str] | None = None,
) -> web.StreamResponse:
    """A page built once per version, off the serving path, sent as it is built
    (:mod:`hub.web.page_builds`); a closed one from the cache once built."""
    u = link_urls(request)
    validators = _page_validators(u, topic, page, chain.now_ms)
    if not_modified(request, validators):
        return unchanged(validators, headers)
    if request.method == "HEAD":
        return await stream(request, validators, [], headers=headers)
    reading = request.app[READING]
    public = u.tag == reading.urls.tag  # (an alias's links differ: built per alias)
    if page.closed:
        cached = reading.doc_cache.get(validators.tag)
        if cached is None and public:
            cached = await _stored_page(reading, topic, page, validators.tag)
        if cached is not None:
            return await send_cached(
                request, validators, reading.doc_cache, validators.tag, cached, headers=headers
            )
    head = _page_head(u, topic, page).encode()
    build = await reading.page_builds.get(
        f"cl {u.tag} {topic}", topic, page, head, validators.tag, store=public
    )
    if build.page != page:  # a newer version, or the one under way (see page_builds)
        validators = _page_validators(u, topic, build.page, chain.now_ms)
        if not_modified(request, validators):
            return unchanged(validators, headers)
    gz = accepts_gzip(request)
    text = build.text
    length = None
    if text is not None:
        length = text.gz_length if gz else text.length
    return await send_pieces(
        request, validators, build.pieces(gz), gzipped=gz, length=length, headers=headers
    )


async def changelist_page(request: web.Request) -> web.StreamResponse:
    topic = await known_topic(request)
    n = page_number(request.match_info["page"])
    chain, page = await request.app[READING].pages.page(topic, n)
    if page is None:
        first = chain.closed[0].n if chain.closed else chain.open.n
        why = "it was withdrawn after retention trimmed it" if n < first else "it does not exist"
        raise NotFound(
            f"no Change List page {n} for topic {topic!r}: {why}; "
            f"see {link_urls(request).changelist_index(topic)}",
            topic=topic,
            page=n,
        )
    return await _serve_page(request, topic, chain, page)


async def topic_uri(request: web.Request) -> web.StreamResponse:
    """``GET /topics/{name}``: the open Change List page, with WebSub discovery links."""
    topic = await known_topic(request)
    chain = await request.app[READING].pages.advance(topic)
    u = link_urls(request)
    headers = {
        "Link": u.links(u.topic(topic)),
        "Content-Location": u.changelist_page(topic, chain.open.n),
    }
    return await _serve_page(request, topic, chain, chain.open, headers)


async def changelist_index(request: web.Request) -> web.StreamResponse:
    topic = await known_topic(request)
    chain = await request.app[READING].pages.advance(topic, "all")
    u = link_urls(request)
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


# -- Resource Lists -------------------------------------------------------------------------


async def resource_list(request: web.Request) -> web.StreamResponse:
    """The whole list (one version built once, off the loop, then cached), or its index."""
    topic = await known_topic(request)
    u, snapshots = link_urls(request), request.app[READING].snapshots
    probe = await snapshots.probe(topic)
    if probe.size <= snapshots.page_entries:

        def validators_of(last_id: str | None) -> Validators:
            modified = id_ms(last_id or "0-0")
            tag = f"{u.tag}-rl-{topic}-{last_id or '0-0'}"
            return Validators(tag, modified, settled=modified < probe.now_ms - 1000)

        early = validators_of(probe.last_id)
        if not_modified(request, early):
            return unchanged(early)

        async def build() -> Rendered | None:
            exact = await snapshots.exact(topic)
            if exact is None:
                return None
            head = rendering.RSHUB_URLSET_OPEN + rendering.root(
                "resourcelist",
                [("up", u.capabilitylist(topic))],
                at=exact.at_ms,
                completed=exact.at_ms,
            )
            return await request.app[READING].parser.run(
                rendering.resource_list,
                head,
                exact.fold,
                exact.at_ms,
                exact.last_id,
                inline=len(exact.fold) <= rendering.INLINE_ENTRIES,
            )

        wait = request.app[READING].snapshot_builds.wait_seconds
        try:
            built = await request.app[READING].builds.get(
                f"rl {u.tag} {topic}",
                probe.last_id or "",
                build,
                lambda r: r.last_id or "",
                wait=wait,
            )
        except TimeoutError:
            raise _pending(u, topic, wait) from None
        if built is not None:  # this version, or an earlier one while this one is built
            return await send_rendered(request, validators_of(built.last_id), built)
        # it outgrew one document meanwhile: serve the index
    # Snapshots are stored, so rendered under the public base; pages are relinked per alias.
    builds = request.app[READING].snapshot_builds
    snap = await builds.latest(topic, request.app[READING].urls)
    if snap is None:
        raise _pending(u, topic, builds.wait_seconds)
    parts = [
        rendering.INDEX_OPEN,
        rendering.root(
            "resourcelist",
            [("up", u.capabilitylist(topic))],
            at=snap.at_ms,
            completed=snap.completed_ms,
        ),
    ]
    parts.extend(
        rendering.index_entry(u.resourcelist_page(topic, snap.id, k), at=snap.at_ms)
        for k in range(snap.pages)
    )
    parts.append(rendering.INDEX_CLOSE)
    validators = Validators(f"{u.tag}-rli-{topic}-{snap.id}", snap.completed_ms)
    return await stream(request, validators, rendering.chunked(parts))


def _pending(u: HubUrls, topic: str, waited: float) -> SnapshotPending:
    return SnapshotPending(
        f"the first Resource List snapshot of topic {topic!r} is being built; "
        f"read {u.resourcelist(topic)} again after the Retry-After seconds",
        retry_after=max(waited, 1.0),
    )


async def resource_list_page(request: web.Request) -> web.StreamResponse:
    topic = await known_topic(request)
    snap_id, _, k = request.match_info["page"].partition("-")
    reading, u = request.app[READING], link_urls(request)
    built = None
    if snap_id.isascii() and snap_id.isdigit() and k.isascii() and k.isdigit() and len(k) <= 6:

        async def build() -> Rendered | None:
            body = await reading.snapshots.page(topic, snap_id, int(k))
            if body is None:
                return None
            if u.base != reading.urls.base:
                body = rendering.relinked(body, reading.urls.base, u.base)
            return await asyncio.to_thread(rendering.rendered, [body], int(snap_id), None)

        # A page is immutable: read from Redis and gzipped once however many ask, then
        # sent in slices (ten readers of a 4 MB page each reading and gzipping it took
        # the CPU that /healthz needed: p90 112 ms).
        key = f"rlp {u.tag} {topic} {snap_id}-{k}"
        built = await reading.builds.get(key, "immutable", build)
    if built is None:
        raise NotFound(
            f"no Resource List page {request.match_info['page']!r} for topic {topic!r}: "
            f"snapshots expire; read {u.resourcelist(topic)} again",
            topic=topic,
        )
    validators = Validators(f"{u.tag}-rlp-{topic}-{snap_id}-{k}", int(snap_id), immutable=True)
    return await send_rendered(request, validators, built)
