-- One plain command on one key, sent through the script pipe (hub.store.script_pipe) rather
-- than redis-py: subscribing 10,000 spent a fifth of the hub's time in redis-py's
-- per-command machinery for the few plain reads and writes around each verification
-- (py-spy, bench/scale.py). The pipe routes a call by its first key, on a Cluster too.
-- KEYS: 1 the key
-- ARGV: 1 the command, 2... its arguments after the key
return redis.call(ARGV[1], KEYS[1], unpack(ARGV, 2))
