-- Append delivery attempts to their subscriptions' logs, bounded, and note last successes;
-- only for subscriptions that still exist (a batch written after a deletion adds nothing).
-- KEYS: 1 subscriptions hash, 2 last-success hash, then one attempts list per callback
-- ARGV: 1 entries kept per log, then per callback: callback, the position (1-based) of its
--       last 2xx among its attempts (0: none), its attempt JSONs oldest first joined by
--       newlines (JSON text holds none)
local subs, successes, keep = KEYS[1], KEYS[2], tonumber(ARGV[1])
local k = 3
for i = 2, #ARGV, 3 do
  local cb, success = ARGV[i], tonumber(ARGV[i + 1])
  if redis.call('HEXISTS', subs, cb) == 1 then
    local n = 0
    for entry in string.gmatch(ARGV[i + 2], '[^\n]+') do
      n = n + 1
      redis.call('LPUSH', KEYS[k], entry)
      if n == success then redis.call('HSET', successes, cb, entry) end
    end
    redis.call('LTRIM', KEYS[k], 0, keep - 1)
  end
  k = k + 1
end
return 0
