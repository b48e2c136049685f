-- How far behind a position each reader of a stream is, without sending the events back.
-- Reading entries into Lua holds Redis (~2.7 us each), so one call reads at most ARGV[1]
-- entries over all positions; the caller goes on from where a count stopped.
-- KEYS: 1 events stream
-- ARGV: 1 budget (entries this call reads at most), then pairs: position (an event id to
--       count after), most events still to count after it
-- Returns, per pair reached before the budget ran out: {events read, id of the first of
-- them or '', id of the last of them or '', 1 if this position's count is complete (the
-- stream's end or its most reached) else 0}.
local stream, left = KEYS[1], tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV, 2 do
  if left <= 0 then break end
  local most = tonumber(ARGV[i + 1])
  local ask = math.min(most, left)
  local rows = redis.call('XRANGE', stream, '(' .. ARGV[i], '+', 'COUNT', ask)
  local first, last, done = '', '', 0
  if #rows > 0 then first, last = rows[1][1], rows[#rows][1] end
  if #rows < ask or ask == most then done = 1 end
  left = left - #rows
  out[#out + 1] = {#rows, first, last, done}
end
return out
