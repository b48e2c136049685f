-- A WebSub delivery lease as the owners hash holds it (see hub.store.leases): the holder's
-- node and its fencing token, one space between. claim.lua writes it; every fenced write
-- (cursors, dead letters, the subscription's record) checks it.
local function lease_entry(node, token)
  return node .. ' ' .. token
end
-- The node and the token of an entry (nil for one the hub did not write).
local function lease_parts(entry)
  return string.match(entry, '^(%S+) (%d+)$')
end
-- Whether node holds the lease on callback cb with that fencing token.
local function holds_lease(owners, cb, node, token)
  return redis.call('HGET', owners, cb) == lease_entry(node, token)
end
