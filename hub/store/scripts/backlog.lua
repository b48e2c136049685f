-- How far behind a position each reader of a stream is, without sending the events back.
-- KEYS: 1 events stream
-- ARGV: 1 cap (count at most this many events per position), 2.. positions (event ids)
-- Returns, per position: {events after it (at most cap), id of the first of them or ''}.
local stream, cap = KEYS[1], tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV do
  local rows = redis.call('XRANGE', stream, '(' .. ARGV[i], '+', 'COUNT', cap)
  local first = ''
  if #rows > 0 then first = rows[1][1] end
  out[#out + 1] = {#rows, first}
end
return out
