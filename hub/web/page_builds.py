"""Change List pages built off the serving path, and followed by their readers as they grow.

A page of 50,000 entries took ~2 s to read from Redis, render and gzip before its first byte
was sent (``bench/documents_served.py``): longer than a reader should wait. So a page is
built by a task of its own, batch by batch (read from the stream, the next batch read while
this one is rendered in the parse pool, gzipped in a thread: :class:`hub.core.page_text.
PageWriter`), and every reader of that version follows the one build (:meth:`PageBuild.
pieces`): the first bytes go out after the first batch, however big the page. A reader that
goes away leaves the build running for the others (and for the cache).

Once built, a closed page goes to the cache of closed pages (:class:`hub.web.cache.ByteCache`,
bounded) and is sent from there with its length; gzipped, it is kept in Redis too
(:mod:`hub.store.rendered_pages`), for every process and the next start. The last version
built of each topic's open page is kept (least recently used out, ``max_bytes`` in all),
and the next version goes on from it: only the entries published since are read, rendered
and gzipped, and the page's close reuses them too. While an open page is built from nothing
(a fresh process), a reader of a newer version of that page follows that build rather than
start a second one: the page it gets is the earlier version (its ``ETag`` and
``Last-Modified`` say which), whose entries are a prefix of the newer one's.

A page is only ever sent whole: a build checks, as the whole page was read before, that
retention did not trim it; if it did, a reader not yet answered gets 404, and a reader
already sent the first pieces has its connection cut (a chunked body without its end).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator

from hub.core import rendering
from hub.core.exceptions import NotFound
from hub.core.page_text import PageText, PageWriter
from hub.core.tasks import Tasks
from hub.live.parsing import DocumentParser
from hub.store.event_store import EventStore
from hub.store.pages import Page
from hub.store.redis_connection import StoreError
from hub.store.rendered_pages import RenderedPages
from hub.web.cache import ByteCache

log = logging.getLogger(__name__)

#: Events read from Redis per round trip while a page is built.
READ_BATCH = 5000
#: A piece gzipped on the loop when at most this long (a thread's hand-off costs more).
INLINE_GZIP_BYTES = 64 * 1024


def _withdrawn(topic: str, page: Page, when: str) -> NotFound:
    return NotFound(
        f"Change List page {page.n} of {topic!r} was withdrawn: retention trimmed it{when}",
        topic=topic,
        page=page.n,
    )


class PageBuild:
    """One version of one page, being built or built: ``page`` is the version."""

    def __init__(self, topic: str, page: Page, start: PageBuild | None) -> None:
        self.topic = topic
        self.page = page
        #: The earlier version it goes on from (a short build), if any; let go once used.
        self.start = start.text if start is not None else None
        self.start_page = start.page if start is not None else None
        #: Whether it goes on from an earlier version (then it is short).
        self.going_on = self.start is not None
        #: Set once the first batch was read and checked: then readers may be answered.
        self.writer: PageWriter | None = None
        self.text: PageText | None = None
        self.error: BaseException | None = None
        self.task: asyncio.Task[None] | None = None
        self._grown = asyncio.Event()

    @property
    def done(self) -> bool:
        return self.text is not None or self.error is not None

    def grew(self) -> None:
        """Wake the readers: the page grew, began, ended or failed."""
        grown, self._grown = self._grown, asyncio.Event()
        grown.set()

    async def started(self) -> None:
        """Return once the page can be sent; raise the build's error when it failed first."""
        while self.writer is None:
            if self.error is not None:
                raise self.error
            await self._grown.wait()

    async def pieces(self, gz: bool) -> AsyncIterator[bytes | memoryview]:
        """The page's pieces (gzipped: one gzip member) from its start, as they are built.

        Raises the build's error if it fails (the page must then not be taken as whole).
        """
        await self.started()
        assert self.writer is not None
        sent = 0
        while True:
            written = self.writer.gz if gz else self.writer.raw
            if sent < len(written):  # what is there now, as one piece (pieces can be small)
                end = len(written)
                yield written[sent] if end == sent + 1 else b"".join(written[sent:end])
                sent = end
                continue
            if self.error is not None:
                raise self.error
            if self.text is not None:
                return
            await self._grown.wait()


class PageBuilds:
    """The builds of each topic's pages: one per page at a time, shared by its readers; the
    open pages' last versions kept to go on from; closed pages cached."""

    def __init__(
        self,
        store: EventStore,
        parser: DocumentParser,
        tasks: Tasks,
        closed: ByteCache,
        stored: RenderedPages,
        *,
        max_bytes: int,
        wait_seconds: float,
    ) -> None:
        self.store = store
        #: Closed pages built under the public base, gzipped, for every process.
        self.stored = stored
        self.parser = parser
        self.tasks = tasks
        #: Built closed pages, by their validators' tag (and ``tag|gz``).
        self.closed = closed
        self.max_bytes = max_bytes
        #: The longest a reader waits for a build of an earlier version of its page (one
        #: that goes on from a version before it: short) before it follows that build.
        self.wait_seconds = wait_seconds
        #: Builds started (for tests: one per version, not one per reader).
        self.started = 0
        #: Events read from the stream by builds (for tests: each entry read once).
        self.events_read = 0
        self._running: dict[tuple[str, int], PageBuild] = {}
        #: The last open page built, per document key (``key`` of :meth:`get`).
        self._open: OrderedDict[str, PageBuild] = OrderedDict()
        self._open_bytes = 0

    @property
    def kept_bytes(self) -> int:
        """What the open pages kept take (at most ``max_bytes``)."""
        return self._open_bytes

    def clear(self) -> None:
        """Forget the open pages kept (closed ones are the cache's)."""
        self._open.clear()
        self._open_bytes = 0

    async def get(
        self, key: str, topic: str, page: Page, head: bytes, tag: str, *, store: bool = False
    ) -> PageBuild:
        """The build to send for ``page``: this version of it, or a newer one, or, while the
        open page is built from nothing, the version under way; started if none is.

        ``key``: the topic's documents under one base URL (their heads differ per base);
        ``head``: the page's head as rendered for ``page``; ``tag``: its validators' tag
        (the closed pages' cache key); ``store``: a closed page built is kept in Redis too
        (:mod:`hub.store.rendered_pages`: pages under the public base, which every process
        serves).
        """
        waited = False
        while True:
            kept = self._open.get(key)
            if kept is not None and not page.closed and _prefix(page, kept.page):
                self._open.move_to_end(key)
                return kept  # this version, or one read just after the request's
            if kept is not None and not _prefix(kept.page, page):
                kept = None
            running = self._running.get((key, page.n))
            if running is None or (
                not _prefix(running.page, page) and not _prefix(page, running.page)
            ):
                return self._start(key, topic, page, head, tag, kept, store=store)
            if running.page.closed or (not page.closed and running.page.count >= page.count):
                return running  # this version, or a newer one
            if not running.going_on or waited:
                if not page.closed:
                    return running  # built from nothing: its earlier version now, not a second
                # the open version of this page that closed since: no reader waits for it
                return self._start(key, topic, page, head, tag, None, share=False, store=store)
            # a short build of an earlier version: go on from it once it ends (waited for
            # once, at most ``wait_seconds``)
            assert running.task is not None
            waited = True
            await asyncio.wait([running.task], timeout=self.wait_seconds)

    def _start(
        self,
        key: str,
        topic: str,
        page: Page,
        head: bytes,
        tag: str,
        start: PageBuild | None,
        *,
        share: bool = True,
        store: bool = False,
    ) -> PageBuild:
        build = PageBuild(topic, page, start)
        if share:
            self._running[(key, page.n)] = build
        self.started += 1
        build.task = self.tasks.spawn(
            f"changelist {topic} {page.n}",
            self._build(build, head, key, tag, share, store),
            on_end=_retrieved,
        )
        return build

    def _keep(self, key: str, build: PageBuild) -> None:
        assert build.text is not None
        old = self._open.get(key)
        if old is not None and _prefix(build.page, old.page) and old.page != build.page:
            return  # a newer version of it was kept meanwhile
        if old is not None:
            del self._open[key]
            self._open_bytes -= _size(old)
        if build.text.nbytes > self.max_bytes:
            return
        self._open[key] = build
        self._open_bytes += _size(build)
        while self._open_bytes > self.max_bytes:
            _, dropped = self._open.popitem(last=False)
            self._open_bytes -= _size(dropped)

    async def _build(
        self, build: PageBuild, head: bytes, key: str, tag: str, shared: bool, store: bool
    ) -> None:
        try:
            await self._write(build, head)
        except Exception as exc:  # the readers get it (404, 503, or a cut connection)
            build.error = exc
        except BaseException:  # cancelled: the hub stops
            build.error = ConnectionResetError("the hub is stopping")
            raise
        finally:
            # done here, not in a callback later: a reader that saw the end finds it kept
            if shared and self._running.get((key, build.page.n)) is build:
                del self._running[(key, build.page.n)]
            text = build.text
            gz = None
            if text is not None and build.page.closed:
                raw, gz = text.joined()
                self.closed.put(tag, raw)
                self.closed.put(tag + "|gz", gz)
            elif text is not None:
                self._keep(key, build)
            build.grew()
        if gz is not None and store:
            try:
                await self.stored.put(build.topic, build.page.n, tag, gz)
            except StoreError as exc:  # only what another process could have reused
                log.info("closed page %d of %r not stored: %s", build.page.n, build.topic, exc)

    async def _write(self, build: PageBuild, head: bytes) -> None:
        """Read, render and gzip the page from the earlier version it goes on from, or from
        its first event; never a partial page."""
        topic, page, store = build.topic, build.page, self.store
        start, start_page = build.start, build.start_page
        if start is None or start_page is None:
            writer, after, read = PageWriter(head), None, 0
        else:
            if head == start.head:  # the same head: no gzip but of what is new
                writer = PageWriter.going_on(start, head)
            else:
                writer = await asyncio.to_thread(PageWriter.going_on, start, head)
            after, read = start_page.last, start_page.count
        build.start = None  # its pieces are the writer's now: the rest of it may go
        if page.first is not None and page.last is not None and read < page.count:
            begin = page.first if after is None else f"({after}"
            # a first batch small enough to render on the loop: the first bytes go out soon
            first_batch = min(rendering.INLINE_ENTRIES, page.count - read)
            rows = await store.range(topic, begin, page.last, first_batch)
            if after is None and (not rows or rows[0][0] != page.first):
                raise _withdrawn(topic, page, "")
            if after is not None and not await store.contains(topic, page.first):
                raise _withdrawn(topic, page, "")
            while rows:
                read += len(rows)
                self.events_read += len(rows)
                following = None
                if read < page.count:  # the next batch is read while this one is rendered
                    following = asyncio.ensure_future(
                        store.range(
                            topic, f"({rows[-1][0]}", page.last, min(READ_BATCH, page.count - read)
                        )
                    )
                try:
                    await self._render(writer, rows, page.from_ms)
                except BaseException:
                    if following is not None:
                        following.cancel()
                    raise
                build.writer = writer
                build.grew()
                rows = await following if following is not None else []
        build.writer = writer
        if page.first is not None:
            if read != page.count or not await store.contains(topic, page.first):
                raise _withdrawn(topic, page, " while it was read")
        if sum(map(len, writer.raw)) <= INLINE_GZIP_BYTES:
            build.text = writer.finish()
        else:
            build.text = await asyncio.to_thread(writer.finish)

    async def _render(self, writer: PageWriter, rows: list[tuple[str, bytes]], floor: int) -> None:
        inline = len(rows) <= rendering.INLINE_ENTRIES
        piece = await self.parser.run(rendering.change_rows, "", rows, floor, inline=inline)
        if len(piece) <= INLINE_GZIP_BYTES:
            writer.add(piece)
        else:  # zlib releases the GIL: a thread will do
            await asyncio.to_thread(writer.add, piece)


def _prefix(a: Page, b: Page) -> bool:
    """Whether ``a``'s entries are the first of ``b``'s: versions of one page (pages only
    grow at their end, and a closed one never changes)."""
    return (
        a.n == b.n
        and a.first == b.first
        and a.from_ms == b.from_ms
        and a.count <= b.count
        and (not a.closed or a == b)
    )


def _retrieved(done: asyncio.Task[None]) -> None:
    """A build's end: its error, if any, went to its readers (retrieved here, not logged)."""
    if not done.cancelled():
        done.exception()


def _size(build: PageBuild) -> int:
    return build.text.nbytes if build.text is not None else 0
