-- Events in a range and the newest id retention ever trimmed, read in one atomic step, so
-- the caller knows for sure whether events before the first row are gone (hub.live.feed).
-- KEYS: 1 events stream, 2 meta hash
-- ARGV: 1 start, 2 end (XRANGE syntax), 3 count
-- Returns {rows as XRANGE gives them, trimmed-through id or ''}.
local rows = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', ARGV[3])
return {rows, redis.call('HGET', KEYS[2], '$TRIMMED_THROUGH') or ''}
