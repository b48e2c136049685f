-- Delivery cursor writes, fenced: written only while the writer still holds the lease
-- with that fencing token, and never backwards.
-- KEYS: 1 owners hash, 2 cursors hash
-- ARGV: 1 node, then triples: callback, token, cursor
-- Returns the callbacks whose write was refused because the lease is not ours.
local owners, cursors, node = KEYS[1], KEYS[2], ARGV[1]
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
    if newer then redis.call('HSET', cursors, cb, cursor) end
  else
    refused[#refused + 1] = cb
  end
end
return refused
