-- Remove a subscription with its cursor, its retention hold, its delivery lease, its
-- dead letters and its attempt log, atomically.
-- KEYS: 1 subscriptions hash, 2 cursors hash, 3 owners hash, 4 holds sorted set,
--       5 dead-letter stream, 6 attempts list, 7 last-success hash,
--       8 requests hash, 9 request marks sorted set (8-9 only with ARGV 2)
-- ARGV: 1 callback, 2 what decides: 'any'; 'latest' (3 the unsubscribe request's number,
--       see request_arrived.lua, 4 ms to remember that number); or 'made-with' (3 the
--       token fingerprint the stored record must hold: a revocation removes only what its
--       token made, never a re-subscription made meanwhile with another token)
-- Returns 1 if the subscription existed, 0 if not, -1 (nothing removed) when a later
-- request for the same callback was stored already (the latest request wins), or the
-- record was not made with that token.
--#include latest_request
if ARGV[2] == 'latest' and superseded(KEYS[8], KEYS[9], ARGV[1], ARGV[3], ARGV[4]) then
  return -1
end
if ARGV[2] == 'made-with' then
  local record = redis.call('HGET', KEYS[1], ARGV[1])
  if not record then return 0 end
  local ok, fields = pcall(cjson.decode, record)
  if not ok or type(fields) ~= 'table' or fields['token_fingerprint'] ~= ARGV[3] then
    return -1
  end
end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('DEL', KEYS[5])
redis.call('DEL', KEYS[6])
redis.call('HDEL', KEYS[7], ARGV[1])
return redis.call('HDEL', KEYS[1], ARGV[1])
