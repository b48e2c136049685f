-- The Redis server's clock in ms: the one clock every hub process agrees on (their own
-- may drift apart), for lease and heartbeat expiry and page times.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
