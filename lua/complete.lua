-- idemgate complete: store the response, only while no one else holds the record,
-- and wake the duplicates that may be waiting for it.
-- KEYS[1] record key; ARGV[1] lock token, ARGV[2] encoded response, ARGV[3] ttl in ms,
-- ARGV[4] fingerprint, ARGV[5] completion channel, ARGV[6] 'PUBLISH', or 'SPUBLISH' in a
-- cluster (sharded pub/sub: the channel has the record's hash tag, so its slot),
-- ARGV[7] "hash" to write the previous layout (`redis.record_format`; see record.lua,
-- prepended), anything else or nothing: one string (a hash record is rewritten as one).
-- The wake-up is published only when the record says a duplicate was told "in flight"
-- (w, set by claim.lua), or when the record had expired (who saw it is unknown).
-- Commands of a completion: GET, SET (+ PUBLISH when waited for; GET twice where the
-- record is missing or a hash, or the hash layout is asked for).
-- Reply: 1 stored (also: already stored by this token, or the record had expired and
-- nobody else had claimed it) | 0 lease lost (another token holds or completed it).
local rec = KEYS[1]
local hash = ARGV[7] == 'hash'
local got = redis.pcall('GET', rec)
-- The common case, a string record written as a string: completed in place, undecoded.
-- Otherwise (no record, a hash, or the hash layout asked for) it is read again, decoded.
if type(got) == 'string' and not hash then
  local stored, waited = rec_complete_string(rec, got, ARGV[1], ARGV[2], ARGV[3])
  if waited then
    redis.call(ARGV[6], ARGV[5], 'C')
  end
  return stored
end
local v = rec_get(rec)
if not v then
  rec_put(rec, hash, false, 'C', false, ARGV[4], ARGV[1], '', ARGV[2], ARGV[3])
  redis.call(ARGV[6], ARGV[5], 'C')
  return 1
end
if v.t ~= ARGV[1] then
  return 0
end
if v.s == 'L' then
  rec_put(rec, hash, not v.hash, 'C', v.w, v.f, v.t, v.n or '', ARGV[2], ARGV[3])
  if v.w then
    redis.call(ARGV[6], ARGV[5], 'C')
  end
end
return 1
