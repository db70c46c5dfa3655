-- idemgate wait: join the fleet-wide waiters of a key, unless there are too many.
-- KEYS[1] waiters counter key; ARGV[1] max waiters, ARGV[2] counter ttl in ms.
-- Reply: 1 joined (leave with DECR) | 0 refused (cap reached).
local n = redis.call('INCR', KEYS[1])
if n > tonumber(ARGV[1]) then
  redis.call('DECR', KEYS[1])
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
