-- A whole Resource List at one instant (see hub.store.snapshots), unless it has too many URIs.
-- The fold is copied (COPY, in Redis, in one step) so that the hub can then read the copy
-- in small HSCAN batches: the read stays exact without one huge reply to parse at once.
-- KEYS: 1 resources hash, 2 topic meta hash, 3 the copy to make (same hash slot)
-- ARGV: 1 most URIs, 2 the copy's time to live (ms)
-- Returns {seconds, microseconds, last id or false, number of URIs}, or {} if too many.
local n = redis.call('HLEN', KEYS[1])
if n > tonumber(ARGV[1]) then return {} end
local t = redis.call('TIME')
if n > 0 then
  redis.call('COPY', KEYS[1], KEYS[3], 'REPLACE')
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
end
return {t[1], t[2], redis.call('HGET', KEYS[2], '$LAST_ID'), n}
