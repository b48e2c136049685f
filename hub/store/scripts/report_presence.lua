-- One hub process's live stream clients per topic, replacing its previous report.
-- KEYS: 1 the process's presence hash
-- ARGV: 1 TTL ms, then pairs: field, count
redis.call('DEL', KEYS[1])
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
if #ARGV > 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return 0
