-- Renew our WebSub delivery leases, or release them (ARGV 2 = 0).
-- KEYS: 1 owners hash
-- ARGV: 1 node, 2 lease ms (0 = release), then pairs: callback, token
-- Returns the callbacks whose lease is no longer ours (renewing) or was not (releasing).
local owners, node, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lost = {}
for i = 3, #ARGV, 2 do
  local cb, prefix = ARGV[i], node .. ' ' .. ARGV[i + 1] .. ' '
  local entry = redis.call('HGET', owners, cb)
  if entry and string.sub(entry, 1, #prefix) == prefix then
    if ttl > 0 then
      redis.call('HSET', owners, cb, prefix .. (now + ttl))
    else
      redis.call('HDEL', owners, cb)
    end
  else
    lost[#lost + 1] = cb
  end
end
return lost
