-- Claim WebSub delivery leases (see hub.leases): a free or expired lease of a subscription
-- that still exists becomes ours, with a fresh fencing token; ours is renewed.
-- KEYS: 1 owners hash, 2 owner epoch counter, 3 subscriptions hash
-- ARGV: 1 node, 2 lease ms, 3.. callbacks
-- Returns per callback: its token, 0 when another live node holds it, -1 when it is gone.
local owners, epoch, subs = KEYS[1], KEYS[2], KEYS[3]
local node, ttl = ARGV[1], tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i = 3, #ARGV do
  local cb = ARGV[i]
  if redis.call('HEXISTS', subs, cb) == 0 then
    out[#out + 1] = -1
  else
    local entry = redis.call('HGET', owners, cb)
    local holder, token, expiry
    if entry then holder, token, expiry = string.match(entry, '^(%S+) (%d+) (%d+)$') end
    if entry and holder == node then
      redis.call('HSET', owners, cb, node .. ' ' .. token .. ' ' .. (now + ttl))
      out[#out + 1] = tonumber(token)
    elseif entry and tonumber(expiry) > now then
      out[#out + 1] = 0
    else
      local fresh = redis.call('INCR', epoch)
      redis.call('HSET', owners, cb, node .. ' ' .. fresh .. ' ' .. (now + ttl))
      out[#out + 1] = fresh
    end
  end
end
return out
