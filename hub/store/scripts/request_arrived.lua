-- Number an (un)subscription request as the hub accepts it; forget up to 100 callbacks'
-- request numbers that no request can need any more.
-- KEYS: 1 requests hash, 2 request marks sorted set, 3 the topic's event stream (optional)
-- Returns the request's number (with KEYS[3]: {number, the stream's last id or false}, so
-- that a subscription starts at the topic's end as of its request, in the same round trip):
-- the Redis clock in microseconds, or one more than the last number when that is larger.
-- Numbers only grow, also after Redis lost its data (a request numbered before still loses
-- to one numbered after), while its clock does not go back. (Below 2^53: exact in Lua's
-- doubles.)
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', math.floor(now_us / 1000), 'LIMIT', 0, 100)
if #old > 0 then
  redis.call('HDEL', KEYS[1], unpack(old))
  redis.call('ZREM', KEYS[2], unpack(old))
end
local last = tonumber(redis.call('HGET', KEYS[1], '$REQUEST_SEQ') or '0')
local number = now_us
if last >= number then
  number = last + 1
end
redis.call('HSET', KEYS[1], '$REQUEST_SEQ', string.format('%d', number))
if KEYS[3] then
  local newest = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)[1]
  return {number, newest and newest[1] or false}
end
return number
