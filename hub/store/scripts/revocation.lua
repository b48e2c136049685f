-- Revoke a token, or lift a revocation, and raise the version every hub process polls.
-- KEYS: 1 the revocations hash, 2 its version counter
-- ARGV: 1 'revoke' or 'lift', 2 the field, 3 the record (revoke), 4 the most kept (revoke)
-- Returns 1 when the set changed, 0 when not (revoked already, or nothing to lift), -1 when
-- it is full.
if ARGV[1] == 'lift' then
  if redis.call('HDEL', KEYS[1], ARGV[2]) == 1 then
    redis.call('INCR', KEYS[2])
    return 1
  end
  return 0
end
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then return 0 end
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then return -1 end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('INCR', KEYS[2])
return 1
