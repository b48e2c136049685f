-- Renew (or, with lease ms 0, drop) a node's heartbeat in one topic (see hub.store.leases):
-- what claim.lua reads to tell whether a lease's holder is still alive.
-- KEYS: 1 topic heartbeats hash
-- ARGV: 1 node, 2 lease ms (0 = leaving)
--#include redis_clock
local alive, node, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
if ttl == 0 then
  redis.call('HDEL', alive, node)
  return 0
end
local now = now_ms()
redis.call('HSET', alive, node, now + ttl)
return 1
