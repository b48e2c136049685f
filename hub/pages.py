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
``keys.pages_head``, both by one Lua script (:data:`_ADVANCE`) that runs atomically with the
publishes, so concurrent requests and hub processes always agree on the boundaries.

Every event is scanned once by that script (a background task keeps the chain current, see
:mod:`hub.documents`). Events that retention removes before the chain scanned them (a burst
beyond the length bound between two scans) are detected through the newest trimmed id the
store records (``trimmed_through`` in the topic's meta hash): the empty open page is then
withdrawn too and the chain restarts after them, as in rule 5.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis.asyncio import Redis

from . import keys, replies

#: How long after a window's end the page is closed by time, to absorb small backward
#: steps of the Redis clock (stream ids never go back, but their ms part follows the clock).
GRACE_MS = 1000
#: Events one script call scans at most, so a long backlog never blocks Redis for long.
SCAN_BUDGET = 100_000

# KEYS: 1 stream, 2 pages zset, 3 head hash, 4 topic meta
# ARGV: 1 window ms, 2 max entries, 3 grace ms, 4 scan budget, 5 wanted record ('' | 'all' | n)
# Returns {n, from, first, last, count, wend, now, more, records...}
_ADVANCE = """
local stream, pages, head, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local window, maxn = tonumber(ARGV[1]), tonumber(ARGV[2])
local grace, budget, want = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function ms(id) return tonumber(string.match(id, '^(%d+)')) end
local function seq(id) return tonumber(string.match(id, '-(%d+)$')) end
local function before(a, b)
  local am, bm = ms(a), ms(b)
  if am ~= bm then return am < bm end
  return seq(a) < seq(b)
end
local function wend_of(id) return (math.floor(ms(id) / window) + 1) * window end

local row = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)
local F = row[1] and row[1][1] or nil
local h = redis.call('HMGET', head, 'n', 'from', 'first', 'scanned', 'count', 'wend')
local n, from, first, scanned, count, wend
if h[1] then
  n, from, first, scanned = tonumber(h[1]), tonumber(h[2]), h[3], h[4]
  count, wend = tonumber(h[5]), tonumber(h[6])
elseif F then
  n, from, first, scanned, count, wend = 1, ms(F), '', '', 0, 0
else
  local created = tonumber(redis.call('HGET', meta, 'created_ms') or now)
  return {1, created, '', '', 0, 0, now, 0}
end

-- Rule 5: the open page lost its first event to retention: withdraw it, restart at F.
if first ~= '' and F and before(first, F) then
  n, from, first, scanned, count, wend = n + 1, ms(F), '', '', 0, 0
end
-- Rule 5 also when retention removed events the chain never scanned (a burst beyond the
-- length bound between two scans; the store records the newest trimmed id): the empty
-- open page must not claim them, so it is withdrawn and the chain restarts after them.
local T = redis.call('HGET', meta, 'trimmed_through')
if T and first == '' and scanned ~= '' and before(scanned, T) then
  n, from, scanned, count, wend = n + 1, F and ms(F) or ms(T), T, 0, 0
end

local function close(upto)
  redis.call('ZADD', pages, n, n .. ' ' .. first .. ' ' .. scanned .. ' ' .. from .. ' '
    .. upto .. ' ' .. count)
  n, from, first, count, wend = n + 1, upto, '', 0, 0
end

local seen, more = 0, 0
while true do
  local start = '-'
  if scanned ~= '' then start = '(' .. scanned end
  local rows = redis.call('XRANGE', stream, start, '+', 'COUNT', 1000)
  if #rows == 0 then break end
  for i = 1, #rows do
    local id = rows[i][1]
    if first ~= '' and ms(id) >= wend then close(wend) end        -- rule 1
    if first == '' then first, wend = id, wend_of(id) end
    count, scanned = count + 1, id
    if count >= maxn then close(ms(id)) end                        -- rule 2
  end
  seen = seen + #rows
  if seen >= budget then more = 1 break end
end
if first ~= '' and more == 0 and now >= wend + grace then close(wend) end  -- rule 3

-- Forget the records of withdrawn pages (their first event is gone).
if F then
  while true do
    local r = redis.call('ZRANGE', pages, 0, 0)
    if #r == 0 then break end
    local f = string.match(r[1], '^%d+ (%S+)')
    if before(f, F) then redis.call('ZREM', pages, r[1]) else break end
  end
end

redis.call('HSET', head, 'n', n, 'from', from, 'first', first, 'scanned', scanned,
  'count', count, 'wend', wend)
local out = {n, from, first, scanned, count, wend, now, more}
local recs = {}
if want == 'all' then
  recs = redis.call('ZRANGEBYSCORE', pages, '-inf', '(' .. n)
elseif want ~= '' then
  recs = redis.call('ZRANGEBYSCORE', pages, want, want)
end
for i = 1, #recs do out[#out + 1] = recs[i] end
return out
"""


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
        return int(self.last.split("-", 1)[0]) if self.last else self.from_ms


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
    n, first, last, from_ms, until_ms, count = replies.text(member).split(" ")
    return Page(int(n), first, last, int(from_ms), int(until_ms), int(count))


class PageChain:
    """Computes and records page boundaries; see the module docstring for the rules."""

    def __init__(self, redis: Redis, *, window_seconds: int, max_entries: int) -> None:
        self.redis = redis
        self.window_ms = window_seconds * 1000
        self.max_entries = max_entries
        self._advance = redis.register_script(_ADVANCE)

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
            out = await self._advance(
                keys=script_keys,
                args=[self.window_ms, self.max_entries, GRACE_MS, SCAN_BUDGET, want],
            )
            if not int(out[7]):
                break
        n, from_ms, first, last, count = (replies.text(v) for v in out[:5])
        open_page = Page(
            int(n), first or None, last if first else None, int(from_ms), None, int(count)
        )
        closed = tuple(_record(m) for m in out[8:])
        return Chain(closed, open_page, int(out[6]))

    async def page(self, topic: str, n: int) -> tuple[Chain, Page | None]:
        chain = await self.advance(topic, str(n))
        return chain, chain.find(n)
