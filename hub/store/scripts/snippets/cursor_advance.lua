-- A subscription's delivery cursor (an event id in the cursors hash) and its retention
-- hold (the cursor's ms in the holds sorted set, which append.lua reads before it trims).
local function cursor_key(id)
  local ms, seq = string.match(id, '^(%d+)-?(%d*)$')
  return tonumber(ms) or 0, tonumber(seq) or 0
end
-- Hold the events after cursor for callback cb.
local function hold_cursor(holds, cb, cursor)
  redis.call('ZADD', holds, string.match(cursor, '^%d+') or '0', cb)
end
-- Move cb's cursor to cursor, never backwards, its hold with it.
local function advance_cursor(cursors, holds, cb, cursor)
  local old = redis.call('HGET', cursors, cb)
  if old then
    local old_ms, old_seq = cursor_key(old)
    local new_ms, new_seq = cursor_key(cursor)
    if not (new_ms > old_ms or (new_ms == old_ms and new_seq > old_seq)) then return end
  end
  redis.call('HSET', cursors, cb, cursor)
  hold_cursor(holds, cb, cursor)
end
