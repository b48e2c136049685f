"""Change List pages: where each page of a topic's stream begins and ends.

A topic's events (Redis stream ids ``<ms>-<seq>``, strictly increasing, assigned at receipt)
are cut into consecutive pages, numbered 1, 2, 3, ... Rules, applied in event-id order:

1. A page takes the events of one time window (``window_ms`` long, aligned on the epoch):
   the window of its first event. An event from a later window starts a new page; the page
   before it closes with ``until`` = the end of its window.
2. A page holds at most ``max_entries`` (50,000, Sitemaps limit) events. The event that fills
   it closes it at once, with ``until`` = that event's receipt time.
3. A page whose window has ended (by the Redis clock, plus ``GRACE_MS``) closes with
   ``until`` = the end of its window even if nothing follows it yet.
4. A page's ``from`` is the previous page's ``until``: pages are contiguous. The very first
   page (and a page that restarts after retention, rule 5) begins at its first event.
5. Retention trims the stream from the front. A page whose first event is gone is
   *withdrawn* as a whole (never served as a half page). If that is the open page, the chain
   restarts: a new page number begins at the first retained event.

The open page (the last one) only ever grows at its end; a closed page never changes. The
boundaries of closed pages are recorded in ``keys.pages`` (a sorted set scored by page
number, member ``"n first last from until count"``) and the open page's progress in
``keys.pages_head``, both by one Lua script (``scripts/advance_pages.lua``) that runs
atomically with the publishes, so concurrent requests and hub processes always agree on
the boundaries.

Every event is scanned once by that script (a background task keeps the chain current, see
:mod:`hub.web.app`). Events that retention removes before the chain scanned them (a burst
beyond the length bound between two scans) are detected through the newest trimmed id the
store records (``keys.TRIMMED_THROUGH`` in the topic's meta hash): the empty open page is then
withdrawn too and the chain restarts after them, as in rule 5.
"""

from __future__ import annotations

from dataclasses import dataclass

from hub.core.events import id_ms
from hub.store import keys, scripts
from hub.store.script_pipe import ScriptPipe

#: How long after a window's end the page is closed by time, to absorb small backward
#: steps of the Redis clock (stream ids never go back, but their ms part follows the clock).
GRACE_MS = 1000
#: Events one script call scans at most, so that a long backlog never blocks Redis for long:
#: reading entries into Lua costs ~2.7 us each here, so 100,000 (the budget before
#: 2026-11-25) held Redis for 60-260 ms, stalling every other topic's publishes and live
#: deliveries (WebSocket p99 30-96 ms in ``bench/hub.py``'s figure 3, by ``SLOWLOG``). One
#: ``XRANGE`` of 1,000 is ~3 ms; the caller loops, other clients' commands in between.
SCAN_BUDGET = 1_000


@dataclass(frozen=True, slots=True)
class Page:
    """One Change List page: events ``first`` to ``last`` (inclusive), ``count`` of them."""

    n: int
    first: str | None
    last: str | None
    from_ms: int
    #: ``None`` while the page is open.
    until_ms: int | None
    count: int

    @property
    def closed(self) -> bool:
        return self.until_ms is not None

    @property
    def last_ms(self) -> int:
        """Receipt time of the last event (``from`` for an empty page)."""
        return id_ms(self.last) if self.last else self.from_ms


@dataclass(frozen=True, slots=True)
class Chain:
    """The topic's pages as one script call saw them: retained closed pages, then open."""

    closed: tuple[Page, ...]
    open: Page
    #: The Redis clock (ms) when the boundaries were computed.
    now_ms: int

    def find(self, n: int) -> Page | None:
        if n == self.open.n:
            return self.open
        return next((p for p in self.closed if p.n == n), None)


def _record(member: bytes | str) -> Page:
    n, first, last, from_ms, until_ms, count = keys.text(member).split(" ")
    return Page(int(n), first, last, int(from_ms), int(until_ms), int(count))


class PageChain:
    """Computes and records page boundaries; see the module docstring for the rules."""

    def __init__(self, scripts: ScriptPipe, *, window_seconds: int, max_entries: int) -> None:
        self.scripts = scripts
        self.window_ms = window_seconds * 1000
        self.max_entries = max_entries

    async def advance(self, topic: str, want: str = "") -> Chain:
        """Bring the topic's pages up to date; return the open page and wanted records.

        ``want``: ``""`` for no closed pages, ``"all"`` for every retained one, or a page
        number for that page only.
        """
        script_keys = [
            keys.events(topic),
            keys.pages(topic),
            keys.pages_head(topic),
            keys.topic_meta(topic),
        ]
        while True:
            out = await self.scripts.run(
                scripts.ADVANCE_PAGES,
                script_keys,
                [self.window_ms, self.max_entries, GRACE_MS, SCAN_BUDGET, want],
            )
            if not int(out[7]):
                break
        n, from_ms, first, last, count = (keys.text(v) for v in out[:5])
        open_page = Page(
            int(n), first or None, last if first else None, int(from_ms), None, int(count)
        )
        closed = tuple(_record(m) for m in out[8:])
        return Chain(closed, open_page, int(out[6]))

    async def page(self, topic: str, n: int) -> tuple[Chain, Page | None]:
        chain = await self.advance(topic, str(n))
        return chain, chain.find(n)
