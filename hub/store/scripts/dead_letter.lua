-- Dead-letter a batch, fenced like a cursor write: its events are appended to
-- the subscription's dead-letter stream (trimmed to its bound) and its cursor moves past
-- them, in one step, only while the writer holds the lease with that token; so a process
-- that lost the subscription neither dead-letters nor skips anything.
-- KEYS: 1 owners hash, 2 cursors hash, 3 holds sorted set, 4 dead-letter stream
-- ARGV: 1 node, 2 token, 3 callback, 4 cursor (the batch's last id), 5 max entries,
--       6 dead-lettered at (ms), 7 first failure (ms), 8 last error,
--       then pairs: event id, stored event JSON
-- Returns 1 when done, 0 when refused (the lease is not ours).
--#include lease_entry
--#include cursor_advance
local owners, cursors, holds, dead = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local cb, cursor = ARGV[3], ARGV[4]
if not holds_lease(owners, cb, ARGV[1], ARGV[2]) then return 0 end
for i = 9, #ARGV, 2 do
  redis.call('XADD', dead, '*', 'id', ARGV[i], 'e', ARGV[i + 1], 'at', ARGV[6],
             'since', ARGV[7], 'error', ARGV[8])
end
redis.call('XTRIM', dead, 'MAXLEN', tonumber(ARGV[5]))
advance_cursor(cursors, holds, cb, cursor)
return 1
