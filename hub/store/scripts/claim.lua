-- Claim WebSub delivery leases (see hub.store.leases): a subscription that still exists and
-- whose lease is free, or whose holder's heartbeat *in this topic* (KEYS[4]) has expired on
-- the Redis clock, becomes ours with a fresh fencing token; one we hold already keeps its
-- token. The claimer's own view of the live nodes plays no part: it can be a tick old.
-- KEYS: 1 owners hash, 2 owner epoch counter, 3 subscriptions hash, 4 topic heartbeats
-- ARGV: 1 node, 2 lease ms, then the callbacks
-- Returns per callback: its token, 0 when a live node holds it, -1 when it is gone.
--#include lease_entry
--#include redis_clock
local owners, epoch, subs, alive = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local node, ttl = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
local out = {}
local claimed = false
for i = 3, #ARGV do
  local cb = ARGV[i]
  if redis.call('HEXISTS', subs, cb) == 0 then
    out[#out + 1] = -1
  else
    local entry = redis.call('HGET', owners, cb)
    local holder, token
    if entry then holder, token = lease_parts(entry) end
    local expiry = holder and tonumber(redis.call('HGET', alive, holder) or '0') or 0
    if entry and holder == node then
      out[#out + 1] = tonumber(token)
      claimed = true
    elseif entry and expiry > now then
      out[#out + 1] = 0
    else
      if holder then redis.call('HDEL', alive, holder) end
      local fresh = redis.call('INCR', epoch)
      redis.call('HSET', owners, cb, lease_entry(node, fresh))
      out[#out + 1] = fresh
      claimed = true
    end
  end
end
if claimed then redis.call('HSET', alive, node, now + ttl) end
return out
