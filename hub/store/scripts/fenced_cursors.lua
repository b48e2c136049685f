-- Delivery cursor writes, fenced: written only while the writer still holds the lease
-- with that fencing token, and never backwards.
-- KEYS: 1 owners hash, 2 cursors hash, 3 holds sorted set (cursor ms, read by append.lua)
-- ARGV: 1 node, then triples: callback, token, cursor
-- Returns the callbacks whose write was refused because the lease is not ours.
local owners, cursors, holds, node = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local function key(id)
  local ms, seq = string.match(id, '^(%d+)-?(%d*)$')
  return tonumber(ms) or 0, tonumber(seq) or 0
end
local refused = {}
for i = 2, #ARGV, 3 do
  local cb, lease, cursor = ARGV[i], node .. ' ' .. ARGV[i + 1], ARGV[i + 2]
  if redis.call('HGET', owners, cb) == lease then
    local old = redis.call('HGET', cursors, cb)
    local newer = true
    if old then
      local om, os = key(old)
      local nm, ns = key(cursor)
      newer = nm > om or (nm == om and ns > os)
    end
    if newer then
      redis.call('HSET', cursors, cb, cursor)
      redis.call('ZADD', holds, string.match(cursor, '^%d+') or '0', cb)
    end
  else
    refused[#refused + 1] = cb
  end
end
return refused
