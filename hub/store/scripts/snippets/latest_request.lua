-- Of the (un)subscription requests for one callback, the latest to arrive wins, whatever
-- order their verifications end in (request_arrived.lua numbers them; see
-- hub.store.subscriptions). True when a request numbered above number was stored for cb
-- already; else number is remembered as cb's latest, for remember_ms.
local function superseded(requests, marks, cb, number, remember_ms)
  local stored = redis.call('HGET', requests, cb)
  if stored and tonumber(stored) > tonumber(number) then return true end
  local t = redis.call('TIME')
  redis.call('HSET', requests, cb, number)
  redis.call('ZADD', marks, tonumber(t[1]) * 1000 + tonumber(remember_ms), cb)
  return false
end
