-- Append delivery attempts to their subscriptions' logs, bounded, and note last successes;
-- only for subscriptions that still exist (a batch written after a deletion adds nothing).
-- KEYS: 1 subscriptions hash, 2 last-success hash, then one attempts list per callback
-- ARGV: 1 entries kept per log, then per callback: callback, entry count n,
--       last success JSON (or ''), n attempt JSONs oldest first
local subs, successes, keep = KEYS[1], KEYS[2], tonumber(ARGV[1])
local i, k = 2, 3
while i <= #ARGV do
  local cb, n, success = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  if redis.call('HEXISTS', subs, cb) == 1 then
    for j = 1, n do redis.call('LPUSH', KEYS[k], ARGV[i + 2 + j]) end
    redis.call('LTRIM', KEYS[k], 0, keep - 1)
    if success ~= '' then redis.call('HSET', successes, cb, success) end
  end
  i, k = i + 3 + n, k + 1
end
return 0
