-- A live feed starts following a topic by notice (hub.live.feed): its process joins the
-- topic's tails set, so that every later append tells it (append.lua), and learns the
-- stream's last id, in one atomic step: no append falls between the two.
-- KEYS: 1 tails set, 2 events stream. ARGV: 1 the process's node id.
-- Returns the stream's last id, or '' when it is empty.
redis.call('SADD', KEYS[1], ARGV[1])
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
return #last > 0 and last[1][1] or ''
