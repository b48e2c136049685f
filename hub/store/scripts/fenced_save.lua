-- Save a subscription's record (state, failures, retry time), fenced like a cursor write:
-- only by the lease holder, and only while the subscription exists.
-- KEYS: 1 owners hash, 2 subscriptions hash
-- ARGV: 1 node, 2 token, 3 callback, 4 record JSON
-- Returns 1 when saved, 0 when refused.
--#include lease_entry
if not holds_lease(KEYS[1], ARGV[3], ARGV[1], ARGV[2]) then return 0 end
if redis.call('HEXISTS', KEYS[2], ARGV[3]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
return 1
