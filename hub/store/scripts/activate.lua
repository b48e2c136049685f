-- Save a verified subscription and set (or keep) its delivery cursor, atomically.
-- KEYS: 1 subscriptions hash, 2 cursors hash, 3 holds sorted set (cursor ms, see append.lua)
-- ARGV: 1 callback, 2 record JSON, 3 cursor ('' = keep the existing one, else 0-0)
-- Returns the cursor in force.
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
else
  redis.call('HSETNX', KEYS[2], ARGV[1], '0-0')
end
local cursor = redis.call('HGET', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], string.match(cursor, '^%d+') or '0', ARGV[1])
return cursor
