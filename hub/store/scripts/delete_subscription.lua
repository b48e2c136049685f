-- Remove a subscription with its cursor, its retention hold, its delivery lease, its
-- dead letters and its attempt log, atomically.
-- KEYS: 1 subscriptions hash, 2 cursors hash, 3 owners hash, 4 holds sorted set,
--       5 dead-letter stream, 6 attempts list, 7 last-success hash (5-7 optional)
-- ARGV: 1 callback
-- Returns 1 if the subscription existed.
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
if KEYS[5] then redis.call('DEL', KEYS[5]) end
if KEYS[6] then redis.call('DEL', KEYS[6]) end
if KEYS[7] then redis.call('HDEL', KEYS[7], ARGV[1]) end
return redis.call('HDEL', KEYS[1], ARGV[1])
