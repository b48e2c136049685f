-- Change List page boundaries: scan new events, close pages by time or size, withdraw
-- trimmed ones (see hub.store.pages for the rules).
-- KEYS: 1 stream, 2 pages zset, 3 head hash, 4 topic meta
-- ARGV: 1 window ms, 2 max entries, 3 grace ms, 4 scan budget, 5 wanted record ('' | 'all' | n)
-- Returns {n, from, first, last, count, wend, now, more, records...}
--#include redis_clock
local stream, pages, head, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local window, maxn = tonumber(ARGV[1]), tonumber(ARGV[2])
local grace, budget, want = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local now = now_ms()

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
local h = redis.call('HMGET', head, '$HEAD_N', '$HEAD_FROM', '$HEAD_FIRST', '$HEAD_SCANNED',
  '$HEAD_COUNT', '$HEAD_WEND')
local n, from, first, scanned, count, wend
if h[1] then
  n, from, first, scanned = tonumber(h[1]), tonumber(h[2]), h[3], h[4]
  count, wend = tonumber(h[5]), tonumber(h[6])
elseif F then
  n, from, first, scanned, count, wend = 1, ms(F), '', '', 0, 0
else
  local created = tonumber(redis.call('HGET', meta, '$CREATED_MS') or now)
  return {1, created, '', '', 0, 0, now, 0}
end

-- Rule 5: the open page lost its first event to retention: withdraw it, restart at F.
if first ~= '' and F and before(first, F) then
  n, from, first, scanned, count, wend = n + 1, ms(F), '', '', 0, 0
end
-- Rule 5 also when retention removed events the chain never scanned (a burst beyond the
-- length bound between two scans; the store records the newest trimmed id): the empty
-- open page must not claim them, so it is withdrawn and the chain restarts after them.
local T = redis.call('HGET', meta, '$TRIMMED_THROUGH')
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

redis.call('HSET', head, '$HEAD_N', n, '$HEAD_FROM', from, '$HEAD_FIRST', first,
  '$HEAD_SCANNED', scanned, '$HEAD_COUNT', count, '$HEAD_WEND', wend)
local out = {n, from, first, scanned, count, wend, now, more}
local recs = {}
if want == 'all' then
  recs = redis.call('ZRANGEBYSCORE', pages, '-inf', '(' .. n)
elseif want ~= '' then
  recs = redis.call('ZRANGEBYSCORE', pages, want, want)
end
for i = 1, #recs do out[#out + 1] = recs[i] end
return out
