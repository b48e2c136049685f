-- Delivery cursor writes, fenced: written only while the writer still holds the lease
-- with that fencing token, and never backwards.
-- KEYS: 1 owners hash, 2 cursors hash, 3 holds sorted set (cursor ms, read by append.lua)
-- ARGV: 1 node, then triples: callback, token, cursor
-- Returns the callbacks whose write was refused because the lease is not ours.
--#include lease_entry
--#include cursor_advance
local owners, cursors, holds, node = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local refused = {}
for i = 2, #ARGV, 3 do
  local cb = ARGV[i]
  if holds_lease(owners, cb, node, ARGV[i + 1]) then
    advance_cursor(cursors, holds, cb, ARGV[i + 2])
  else
    refused[#refused + 1] = cb
  end
end
return refused
