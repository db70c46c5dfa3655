-- idemgate complete: store the response, only while no one else holds the record,
-- and wake the duplicates that may be waiting for it.
-- KEYS[1] record key; ARGV[1] lock token, ARGV[2] encoded response, ARGV[3] ttl in ms,
-- ARGV[4] fingerprint, ARGV[5] completion channel, ARGV[6] 'PUBLISH', or 'SPUBLISH' in a
-- cluster (sharded pub/sub: the channel has the record's hash tag, so its slot).
-- The wake-up is published only when the record says a duplicate was told "in flight"
-- (w, set by claim.lua), or when the record had expired (who saw it is unknown).
-- Reply: 1 stored (also: already stored by this token, or the record had expired and
-- nobody else had claimed it) | 0 lease lost (another token holds or completed it).
local rec = KEYS[1]
local v = redis.call('HMGET', rec, 's', 't', 'w')
if not v[1] then
  redis.call('HSET', rec, 's', 'C', 'f', ARGV[4], 't', ARGV[1], 'r', ARGV[2])
  redis.call('PEXPIRE', rec, ARGV[3])
  redis.call(ARGV[6], ARGV[5], 'C')
  return 1
end
if v[2] ~= ARGV[1] then
  return 0
end
if v[1] == 'L' then
  redis.call('HSET', rec, 's', 'C', 'r', ARGV[2])
  redis.call('PEXPIRE', rec, ARGV[3])
  if v[3] then
    redis.call(ARGV[6], ARGV[5], 'C')
  end
end
return 1
