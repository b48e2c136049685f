-- Number an (un)subscription request as the hub accepts it; forget up to 100 callbacks'
-- request numbers that no request can need any more.
-- KEYS: 1 requests hash, 2 request marks sorted set
-- Returns the request's number (per topic, from 1).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, 100)
if #old > 0 then
  redis.call('HDEL', KEYS[1], unpack(old))
  redis.call('ZREM', KEYS[2], unpack(old))
end
return redis.call('HINCRBY', KEYS[1], '$REQUEST_SEQ', 1)
