-- What a Resource List reader needs before it builds (see hub.store.snapshots): in one round trip,
-- and on a Redis Cluster too (where a pipelined TIME is refused).
-- KEYS: 1 resources hash, 2 topic meta hash
-- Returns {number of URIs, last id or false, seconds, microseconds}.
local t = redis.call('TIME')
return {redis.call('HLEN', KEYS[1]), redis.call('HGET', KEYS[2], '$LAST_ID'), t[1], t[2]}
