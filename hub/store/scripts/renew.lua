-- Check which of our WebSub delivery leases are still ours, or release them (ARGV 2 = 1).
-- KEYS: 1 owners hash
-- ARGV: 1 node, 2 release (1) or check (0), then pairs: callback, token
-- Returns the callbacks whose lease is not (or no longer) ours.
--#include lease_entry
local owners, node, release = KEYS[1], ARGV[1], ARGV[2] == '1'
local lost = {}
for i = 3, #ARGV, 2 do
  local cb = ARGV[i]
  if holds_lease(owners, cb, node, ARGV[i + 1]) then
    if release then redis.call('HDEL', owners, cb) end
  else
    lost[#lost + 1] = cb
  end
end
return lost
