-- idemgate extend: the holder's heartbeat; pushes the lease out while the upstream call lives.
-- KEYS[1] record key; ARGV[1] lock token, ARGV[2] lease in ms. Either layout
-- (record.lua, prepended); the record stays as it is.
-- Reply: 1 extended | 0 not ours any more (expired, taken over or completed).
local v = rec_get(KEYS[1])
if v and v.s == 'L' and v.t == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
