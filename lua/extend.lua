-- idemgate extend: the holder's heartbeat; pushes the lease out while the upstream call lives.
-- KEYS[1] record key; ARGV[1] lock token, ARGV[2] lease in ms. Either layout
-- (record.lua, prepended); the record stays as it is.
-- A record that outlives its lease (l, record.lua) keeps doing so: its expiry is pushed
-- to the lease plus l.
-- With `claims = "vouched"` also ARGV[3] fingerprint, ARGV[4] fencing token, ARGV[5]
-- "hash" for the previous layout, ARGV[6] l in ms: a lease Redis no longer has at all (its slot lost its
-- data: a flush, a restart without its AOF) is written back, so that a claim waiting out
-- the slot's quarantine finds it in flight instead of running the key a second time.
-- It is marked as waited for: who was told "in flight" before the loss is unknown.
-- Reply: 1 extended | 2 written back | 0 not ours any more (expired and taken, taken
-- over or completed).
local v = rec_get(KEYS[1])
if v and v.s == 'L' and v.t == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + (v.l or 0))
  return 1
end
if not v and ARGV[3] then
  rec_put(KEYS[1], ARGV[5] == 'hash', false, 'L', true, ARGV[3], ARGV[1], ARGV[4], ARGV[6],
    tonumber(ARGV[2]) + tonumber(ARGV[6]))
  if ARGV[5] == 'hash' then
    -- rec_put sets `w` in a hash only when it replaces a string.
    redis.call('HSET', KEYS[1], 'w', '1')
  end
  return 2
end
return 0
