-- Claim WebSub delivery leases (see hub.store.leases): a subscription that still exists and
-- whose lease is free, or held by a node that is no longer live, becomes ours with a fresh
-- fencing token; one we hold already keeps its token.
-- KEYS: 1 owners hash, 2 owner epoch counter, 3 subscriptions hash
-- ARGV: 1 node, 2 number of live nodes n, 3..2+n the live nodes, then the callbacks
-- Returns per callback: its token, 0 when a live node holds it, -1 when it is gone.
local owners, epoch, subs = KEYS[1], KEYS[2], KEYS[3]
local node, n = ARGV[1], tonumber(ARGV[2])
local live = {}
for i = 3, 2 + n do live[ARGV[i]] = true end
local out = {}
for i = 3 + n, #ARGV do
  local cb = ARGV[i]
  if redis.call('HEXISTS', subs, cb) == 0 then
    out[#out + 1] = -1
  else
    local entry = redis.call('HGET', owners, cb)
    local holder, token
    if entry then holder, token = string.match(entry, '^(%S+) (%d+)$') end
    if entry and holder == node then
      out[#out + 1] = tonumber(token)
    elseif entry and live[holder] then
      out[#out + 1] = 0
    else
      local fresh = redis.call('INCR', epoch)
      redis.call('HSET', owners, cb, node .. ' ' .. fresh)
      out[#out + 1] = fresh
    end
  end
end
return out
