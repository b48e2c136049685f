-- The publish: every change XADDed (all or none), the Resource List fold, retention and
-- the Idempotency-Key, in one atomic step (see hub.store.event_store).
-- KEYS: 1 events stream, 2 resources hash, 3 meta hash, 4 holds sorted set, 5 cursors hash,
--       6 tails set, [7 idempotency key]
-- ARGV: 1 body digest, 2 idempotency ttl, 3 maxlen (0 = none), 4 minid ('' = none),
--       5 now-ms, 6 the changes: "loc NUL change NUL event-json NUL" repeated,
--       7 hold max events (0 = no hold), 8 hold floor ms (events older are not held),
--       9 the caller's node id in the tails set ('' = none), 10 the topic,
--       11 the changes' Resource List states but their ids, in order: each one length byte
--       then the state (hub.core.resource_states.pack_tails; 0, or missing: the earlier form).
-- Returns {0, ids joined by spaces, the last id before them, 1 if retention has more to trim
-- than one call cuts (EventStore.trim calls again)}, or {1, the earlier reply} on a replay.
-- The changes travel as one argument because encoding thousands of arguments costs the
-- client more than the server's work. NUL cannot occur in XML text nor in JSON output.
--#include cursor_advance
local stream, resources, meta, holds, cursors = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
if #KEYS > 6 then
  local prev = redis.call('GET', KEYS[7])
  if prev then
    -- A write the replicas see (the key's own TTL again), so that a WAIT after a replay
    -- covers the first publish where WAIT counts from the connection's own last replicated
    -- write (newer Redis; 6.2 counts from its last command of any kind).
    local ttl = redis.call('PTTL', KEYS[7])
    if ttl > 0 then redis.call('PEXPIRE', KEYS[7], ttl) end
    return {1, prev}
  end
end
-- The stream's last id before this publish: the hub process that published hands its
-- events to its own live feed at once when the feed is at exactly that id (hub.live.feed).
-- '$LAST_ID' is the newest id ever appended (this script alone XADDs to the stream), read
-- as a short string; XREVRANGE returns the whole entry (measured: ~11% of this script's
-- work). Without it (a topic being deleted, say), the stream itself answers.
local before = redis.call('HGET', meta, '$LAST_ID')
if not before then
  before = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)
  before = #before > 0 and before[1][1] or ''
end
local ids, events = {}, {}
local packed, pos, find, sub = ARGV[6], 1, string.find, string.sub
-- The Resource List state: "\1", the id's ms in 6 bytes and its sequence as a varint, then
-- the state packed by the hub (hub.core.resource_states, whose encode makes the same bytes);
-- "<id> <event>" where an id does not pack (doubles hold integers exactly below 2^53).
local tails, tpos, char, floor = ARGV[11] or '', 1, string.char, math.floor
local last_ms, head = nil, false
local function state(id, event, n)
  local dash = find(id, '-', 1, true)
  local ms_text = sub(id, 1, dash - 1)
  if ms_text ~= last_ms then
    last_ms, head = ms_text, false
    local ms = tonumber(ms_text)
    if ms < 253402300800000 then  -- the year 10000: no time the hub renders
      local b = {}
      for i = 6, 1, -1 do
        b[i] = ms % 256
        ms = (ms - b[i]) / 256
      end
      head = '\1' .. char(b[1], b[2], b[3], b[4], b[5], b[6])
    end
  end
  local seq = tonumber(sub(id, dash + 1))
  if not head or seq >= 9007199254740992 then return id .. ' ' .. event end
  local varint
  if seq < 128 then
    varint = char(seq)
  elseif seq < 16384 then
    varint = char(seq % 128 + 128, floor(seq / 128))
  else
    local v = {}
    while seq >= 128 do
      v[#v + 1] = char(seq % 128 + 128)
      seq = floor(seq / 128)
    end
    v[#v + 1] = char(seq)
    varint = table.concat(v)
  end
  return head .. varint .. sub(tails, tpos + 1, tpos + n)
end
while pos <= #packed do
  local a = find(packed, '\0', pos, true)
  local b = find(packed, '\0', a + 1, true)
  local c = find(packed, '\0', b + 1, true)
  local loc, event = sub(packed, pos, a - 1), sub(packed, b + 1, c - 1)
  local id = redis.call('XADD', stream, '*', '$EVENT_FIELD', event)
  ids[#ids + 1] = id
  events[#ids] = event
  local n = string.byte(tails, tpos) or 0
  if sub(packed, a + 1, b - 1) == 'deleted' then
    redis.call('HDEL', resources, loc)
  elseif n > 0 then
    redis.call('HSET', resources, loc, state(id, event, n))
  else
    redis.call('HSET', resources, loc, id .. ' ' .. event)
  end
  tpos = tpos + 1 + n
  pos = c + 1
end
-- Retention, exact so that '$TRIMMED_THROUGH' names the newest event ever trimmed: a client
-- resuming from an older id is told it has a gap (Redis 6.2 does not report trimmed ids).
local trimmed, more = false, 0
local ms = function(id) return tonumber(string.match(id, '^%d+')) or 0 end
-- The hold: no event a WebSub subscription has yet to receive (ms >= its cursor's ms, the
-- lowest score of the holds set) is trimmed, unless it is older than the floor or the
-- stream is more than ARGV[7] events beyond maxlen. O(log n): one ZRANGE.
local hold = false
if ARGV[7] ~= '0' then
  local low = redis.call('ZRANGE', holds, 0, 0, 'WITHSCORES')
  if #low == 0 and redis.call('HLEN', cursors) > 0 then
    -- Cursors written by a hub that kept no holds: index them, once.
    local all = redis.call('HGETALL', cursors)
    for i = 1, #all, 2 do
      hold_cursor(holds, all[i], all[i + 1])
    end
    low = redis.call('ZRANGE', holds, 0, 0, 'WITHSCORES')
  end
  if #low > 0 then hold = math.max(tonumber(low[2]), tonumber(ARGV[8])) end
end
if ARGV[4] ~= '' then
  local cutoff = ms(ARGV[4])
  if hold and hold < cutoff then cutoff = hold end
  local minid = string.format('%d-0', cutoff)
  -- Look before trimming, forwards: when nothing is older (the usual case) this XRANGE
  -- stops at the first entry and returns none, where XREVRANGE from MINID walks the whole
  -- stream on Redis 6.2 (measured 2026-11-25: 22 ms over 100,000 entries), and reading the
  -- first entry to compare costs its conversion (measured: ~20% of this script's work).
  -- When one is older, XREVRANGE finds the newest older one at once (its radix seek
  -- lands: ~20 us), where reading all of them (10,000 a call, before 2026-11-25) held
  -- Redis 30-55 ms. (Nothing is older than 0-0, which an exclusive range cannot name.)
  if cutoff > 0 and #redis.call('XRANGE', stream, '-', '(' .. minid, 'COUNT', 1) > 0 then
    trimmed = redis.call('XREVRANGE', stream, '(' .. minid, '-', 'COUNT', 1)[1][1]
    redis.call('XTRIM', stream, 'MINID', minid)
  end
end
if ARGV[3] ~= '0' then
  local length = redis.call('XLEN', stream)
  local excess = length - tonumber(ARGV[3])
  if excess > 0 then
    -- Only the newest cut id is wanted, and a stream has no index by position: reading
    -- entries into Lua costs ~2.7 us each, so a call reads at most 1,000 of them or this
    -- publish's own size (its XADDs cost as much); the rest goes over the next publishes
    -- and EventStore.trim (it calls again while the reply says more).
    local most = math.max(1000, #ids)
    local cut, last = excess, false
    if hold then
      -- Cut only what no subscription needs, and what is over the hold's own bound.
      local free = {}
      if hold > 0 then
        local upto = string.format('(%d-0', hold)
        free = redis.call('XRANGE', stream, '-', upto, 'COUNT', math.min(excess, most))
      end
      if #free == most and excess > most then more = 1 end
      cut = math.max(#free, excess - tonumber(ARGV[7]))
      if cut > 0 and #free >= cut then last = free[cut][1] end
    end
    if cut > most then cut, last, more = most, false, 1 end
    if cut > 0 then
      if not last then
        last = redis.call('XRANGE', stream, '-', '+', 'COUNT', cut)[cut][1]
      end
      trimmed = last
      redis.call('XTRIM', stream, 'MAXLEN', length - cut)
    end
  end
end
if trimmed then redis.call('HSET', meta, '$TRIMMED_THROUGH', trimmed) end
local joined = table.concat(ids, ' ')
if #ids > 0 then
  redis.call('HSET', meta, '$LAST_ID', ids[#ids], '$LAST_PUBLISH_MS', ARGV[5])
  redis.call('HSETNX', meta, '$CREATED_MS', ARGV[5])
  redis.call('HINCRBY', meta, '$PUBLISHED', #ids)
end
if #KEYS > 6 then redis.call('SET', KEYS[7], ARGV[1] .. '|' .. joined, 'EX', ARGV[2]) end
-- Tail notices: every other process whose feed follows this topic is told what was
-- appended, after what (its feed checks it follows on, else reads the stream). The caller
-- takes its own events from this reply, so it is not told (no echo of its own append). A follower
-- nobody listens for any more (its process died, or its connection is being replaced, which
-- then follows again) leaves the set.
if #ids > 0 then
  local tails = redis.call('SMEMBERS', KEYS[6])
  if #tails > 0 then
    local notice = nil
    for _, node in ipairs(tails) do
      if node ~= ARGV[9] then
        notice = notice or (ARGV[10] .. '\n' .. before .. '\n' .. joined .. '\n'
          .. table.concat(events, '\0'))
        if redis.call('PUBLISH', '$TAIL_CHANNEL' .. node, notice) == 0 then
          redis.call('SREM', KEYS[6], node)
        end
      end
    end
  end
end
return {0, joined, before, more}
