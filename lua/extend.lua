-- idemgate extend: the holder's heartbeat; pushes the lease out while the upstream call lives.
-- KEYS[1] record key; ARGV[1] lock token, ARGV[2] lease in ms.
-- Reply: 1 extended | 0 not ours any more (expired, taken over or completed).
local v = redis.call('HMGET', KEYS[1], 's', 't')
if v[1] == 'L' and v[2] == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
