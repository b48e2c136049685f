-- Remove a subscription with its cursor, its retention hold, its delivery lease and its
-- attempt log, atomically.
-- KEYS: 1 subscriptions hash, 2 cursors hash, 3 owners hash, 4 holds sorted set,
--       5 attempts list, 6 last-success hash
-- ARGV: 1 callback
-- Returns 1 if the subscription existed.
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('DEL', KEYS[5])
redis.call('HDEL', KEYS[6], ARGV[1])
return redis.call('HDEL', KEYS[1], ARGV[1])
