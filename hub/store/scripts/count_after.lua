-- How many events of a stream come after an id (a subscription's lag), counted inside
-- Redis so that no entry crosses the network. Reading entries into Lua holds Redis (~2.7 us
-- each), so one call reads at most ARGV[2] of them; the caller goes on from the last.
-- KEYS: 1 events stream
-- ARGV: 1 the id after which to count ('0-0' = from the start), 2 most entries to read,
--       3 '1' if an id older than every event may be answered by XLEN (the first call)
-- Returns {events counted, the last one's id or '', 1 if the count reached the end}.
local stream, after, most = KEYS[1], ARGV[1], tonumber(ARGV[2])
local first = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)
if #first == 0 then return {0, '', 1} end
local function older(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  ams, bms = tonumber(ams), tonumber(bms)
  return ams < bms or (ams == bms and tonumber(aseq) < tonumber(bseq))
end
if ARGV[3] == '1' and older(after, first[1][1]) then
  return {redis.call('XLEN', stream), '', 1}
end
local rows = redis.call('XRANGE', stream, '(' .. after, '+', 'COUNT', most)
if #rows == 0 then return {0, '', 1} end
return {#rows, rows[#rows][1], #rows < most and 1 or 0}
