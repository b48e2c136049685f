-- How many events of a stream come after an id (a subscription's lag), counted inside
-- Redis so that no entry crosses the network; at most ARGV[2] are counted.
-- KEYS: 1 events stream
-- ARGV: 1 the id after which to count ('0-0' = from the start), 2 the cap
local stream, after, cap = KEYS[1], ARGV[1], tonumber(ARGV[2])
local first = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)
if #first == 0 then return 0 end
local function older(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  ams, bms = tonumber(ams), tonumber(bms)
  return ams < bms or (ams == bms and tonumber(aseq) < tonumber(bseq))
end
if older(after, first[1][1]) then return redis.call('XLEN', stream) end
local count, from = 0, '(' .. after
while count < cap do
  local rows = redis.call('XRANGE', stream, from, '+', 'COUNT', math.min(1000, cap - count))
  if #rows == 0 then break end
  count = count + #rows
  from = '(' .. rows[#rows][1]
end
return count
