-- Revoke a token, or lift a revocation, and raise the version every hub process polls.
-- KEYS: 1 the revocations hash, 2 its version counter
-- ARGV: 1 'revoke' or 'lift', 2 the field, 3 the record (revoke), 4 the most kept (revoke),
--       5 now, epoch seconds (revoke)
-- A revoke first forgets the revocations expired by now (each record's "expires"), so that
-- expired ones neither fill the hash nor keep a token's new revocation from being stored.
-- Returns 1 when the set changed, 0 when not (revoked already, or nothing to lift), -1 when
-- it is full.
if ARGV[1] == 'lift' then
  if redis.call('HDEL', KEYS[1], ARGV[2]) == 1 then
    redis.call('INCR', KEYS[2])
    return 1
  end
  return 0
end
local now = tonumber(ARGV[5])
local forgot = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local ok, record = pcall(cjson.decode, all[i + 1])
  if ok and type(record) == 'table' and type(record['expires']) == 'number'
      and record['expires'] <= now then
    redis.call('HDEL', KEYS[1], all[i])
    forgot = forgot + 1
  end
end
local changed = 0
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  changed = 0
elseif redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[4]) then
  changed = -1
else
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
  changed = 1
end
if changed == 1 or forgot > 0 then redis.call('INCR', KEYS[2]) end
return changed
