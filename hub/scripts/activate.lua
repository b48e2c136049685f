-- Save a verified subscription and set (or keep) its delivery cursor, atomically.
-- KEYS: 1 subscriptions hash, 2 cursors hash
-- ARGV: 1 callback, 2 record JSON, 3 cursor ('' = keep the existing one, else 0-0)
-- Returns the cursor in force.
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
else
  redis.call('HSETNX', KEYS[2], ARGV[1], '0-0')
end
return redis.call('HGET', KEYS[2], ARGV[1])
