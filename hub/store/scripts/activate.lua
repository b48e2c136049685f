-- Save a verified subscription and set (or keep) its delivery cursor, atomically.
-- KEYS: 1 subscriptions hash, 2 cursors hash, 3 holds sorted set (cursor ms, see append.lua),
--       4 requests hash, 5 request marks sorted set (4-5 only with ARGV 4)
-- ARGV: 1 callback, 2 record JSON, 3 cursor ('' = keep the existing one, else 0-0),
--       4 the request's number (see request_arrived.lua), 5 ms to remember that number
-- Returns the cursor in force, or nil (nothing saved) when a later request for the same
-- callback was stored already: the latest request wins.
--#include cursor_advance
--#include latest_request
if ARGV[4] and superseded(KEYS[4], KEYS[5], ARGV[1], ARGV[4], ARGV[5]) then return false end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
else
  redis.call('HSETNX', KEYS[2], ARGV[1], '0-0')
end
local cursor = redis.call('HGET', KEYS[2], ARGV[1])
hold_cursor(KEYS[3], ARGV[1], cursor)
return cursor
