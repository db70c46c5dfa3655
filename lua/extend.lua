-- idemgate extend: the holder's heartbeat; pushes the lease out while the upstream call lives.
-- KEYS[1] record key; ARGV[1] lock token, ARGV[2] lease in ms. Either layout
-- (record.lua, prepended); the record stays as it is.
-- A record that outlives its lease (l, record.lua) keeps doing so: its expiry is pushed
-- to the lease plus l.
-- With `claims = "vouched"` also ARGV[3] fingerprint, ARGV[4] fencing token (Redis' clock
-- in µs when the lease was taken), ARGV[5] "hash" for the previous layout, ARGV[6] l in ms,
-- ARGV[7] the epoch quarantine in ms, and KEYS[2] the epoch marker of the record's slot
-- (claim.lua): a lease Redis no longer has at all because its slot lost its data since
-- the lease was taken (a flush, a restart without its AOF) is written back, so that a
-- claim waiting out the slot's quarantine finds it in flight instead of running the key a
-- second time. It is marked as waited for: who was told "in flight" before the loss is
-- unknown. A slot lost its data since the lease was taken when its epoch marker is gone,
-- or was set later than a quarantine before the lease (a claim acquires only once its
-- slot's marker is a quarantine old, so a marker younger than that is of a later loss;
-- the margin also covers another server's clock). A record deleted on purpose (a forced
-- invalidation) in a slot that lost nothing stays deleted: the reply says the lease is
-- not ours any more, and the holder's completion is refused or, if nobody claimed the
-- key meanwhile, stored.
-- Reply: 1 extended | 2 written back | 0 not ours any more (expired and taken, taken
-- over or completed).
local v = rec_get(KEYS[1])
if v and v.s == 'L' and v.t == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) + (v.l or 0))
  return 1
end
local function lost_since_taken()
  if not KEYS[2] then
    return true
  end
  local since = tonumber(redis.call('GET', KEYS[2]))
  return not since or since > math.floor(tonumber(ARGV[4]) / 1000) - tonumber(ARGV[7])
end
if not v and ARGV[3] and lost_since_taken() then
  rec_put(KEYS[1], ARGV[5] == 'hash', false, 'L', true, ARGV[3], ARGV[1], ARGV[4], ARGV[6],
    tonumber(ARGV[2]) + tonumber(ARGV[6]))
  if ARGV[5] == 'hash' then
    -- rec_put sets `w` in a hash only when it replaces a string.
    redis.call('HSET', KEYS[1], 'w', '1')
  end
  return 2
end
return 0
