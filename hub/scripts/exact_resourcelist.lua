-- A whole Resource List at one instant (see hub.snapshots), unless it has too many URIs.
-- KEYS: 1 resources hash, 2 topic meta hash
-- ARGV: 1 most URIs
-- Returns {seconds, microseconds, last id or false, loc, value, loc, value, ...}, or {} if too many.
if redis.call('HLEN', KEYS[1]) > tonumber(ARGV[1]) then return {} end
local t = redis.call('TIME')
local out = {t[1], t[2], redis.call('HGET', KEYS[2], '$LAST_ID')}
for _, v in ipairs(redis.call('HGETALL', KEYS[1])) do out[#out + 1] = v end
return out
