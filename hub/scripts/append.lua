-- The publish: every change XADDed (all or none), the Resource List fold, retention and
-- the Idempotency-Key, in one atomic step (see hub.store).
-- KEYS: 1 events stream, 2 resources hash, 3 meta hash, [4 idempotency key]
-- ARGV: 1 body digest, 2 idempotency ttl, 3 maxlen (0 = none), 4 minid ('' = none),
--       5 now-ms, 6 the changes: "loc NUL change NUL event-json NUL" repeated.
-- The changes travel as one argument because encoding thousands of arguments costs the
-- client more than the server's work. NUL cannot occur in XML text nor in JSON output.
local stream, resources, meta = KEYS[1], KEYS[2], KEYS[3]
if #KEYS > 3 then
  local prev = redis.call('GET', KEYS[4])
  if prev then return {1, prev} end
end
-- The stream's last id before this publish: the hub process that published hands its
-- events to its own live feed at once when the feed is at exactly that id (hub.feed).
local before = redis.call('XREVRANGE', stream, '+', '-', 'COUNT', 1)
before = #before > 0 and before[1][1] or ''
local ids = {}
local packed, pos, find, sub = ARGV[6], 1, string.find, string.sub
while pos <= #packed do
  local a = find(packed, '\0', pos, true)
  local b = find(packed, '\0', a + 1, true)
  local c = find(packed, '\0', b + 1, true)
  local loc, event = sub(packed, pos, a - 1), sub(packed, b + 1, c - 1)
  local id = redis.call('XADD', stream, '*', '$EVENT_FIELD', event)
  ids[#ids + 1] = id
  if sub(packed, a + 1, b - 1) == 'deleted' then
    redis.call('HDEL', resources, loc)
  else
    redis.call('HSET', resources, loc, id .. ' ' .. event)
  end
  pos = c + 1
end
-- Retention, exact so that '$TRIMMED_THROUGH' names the newest event ever trimmed: a client
-- resuming from an older id is told it has a gap (Redis 6.2 does not report trimmed ids).
local trimmed = false
if ARGV[4] ~= '' then
  -- Look before trimming: XREVRANGE from MINID walks the whole stream on Redis 6.2 when
  -- nothing is older, which is the usual case.
  local first = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)
  local ms = function(id) return tonumber(string.match(id, '^%d+')) end
  if #first > 0 and ms(first[1][1]) < ms(ARGV[4]) then
    local old = redis.call('XRANGE', stream, '-', '(' .. ARGV[4], 'COUNT', 10000)
    if #old == 10000 then
      old = redis.call('XREVRANGE', stream, '(' .. ARGV[4], '-', 'COUNT', 1)
    end
    if #old > 0 then
      trimmed = old[#old][1]
      redis.call('XTRIM', stream, 'MINID', ARGV[4])
    end
  end
end
if ARGV[3] ~= '0' then
  local excess = redis.call('XLEN', stream) - tonumber(ARGV[3])
  if excess > 0 then
    local cut = redis.call('XRANGE', stream, '-', '+', 'COUNT', excess)
    trimmed = cut[#cut][1]
    redis.call('XTRIM', stream, 'MAXLEN', ARGV[3])
  end
end
if trimmed then redis.call('HSET', meta, '$TRIMMED_THROUGH', trimmed) end
local joined = table.concat(ids, ' ')
if #ids > 0 then
  redis.call('HSET', meta, '$LAST_ID', ids[#ids], '$LAST_PUBLISH_MS', ARGV[5])
  redis.call('HSETNX', meta, '$CREATED_MS', ARGV[5])
  redis.call('HINCRBY', meta, '$PUBLISHED', #ids)
end
if #KEYS > 3 then redis.call('SET', KEYS[4], ARGV[1] .. '|' .. joined, 'EX', ARGV[2]) end
return {0, joined, before}
