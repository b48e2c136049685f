-- A hub process says it is alive (or leaving) and learns who else is.
-- KEYS: 1 nodes sorted set, 2 leader key
-- ARGV: 1 node, 2 lease ms (0 = leaving)
-- Returns {leader (1 if this node runs the hub-wide jobs, else 0), live nodes...}
--#include redis_clock
local nodes, leader, node, ttl = KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2])
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', nodes, '-inf', now)
local leads = 0
if ttl > 0 then
  redis.call('ZADD', nodes, now + ttl, node)
  local current = redis.call('GET', leader)
  if not current or current == node then
    redis.call('SET', leader, node, 'PX', ttl)
    leads = 1
  end
else
  redis.call('ZREM', nodes, node)
  if redis.call('GET', leader) == node then redis.call('DEL', leader) end
end
local out = {leads}
for _, n in ipairs(redis.call('ZRANGE', nodes, 0, -1)) do out[#out + 1] = n end
return out
