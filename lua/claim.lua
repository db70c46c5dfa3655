-- idemgate claim: take the lease on a record, or report what holds it.
-- KEYS[1] record key; ARGV[1] fingerprint, ARGV[2] lock token, ARGV[3] lease in ms.
-- Record: a hash {s = "L" (leased) | "C" (completed), f = fingerprint, t = token, r = response}.
-- Reply: {"A"} acquired | {"C", response} | {"I", remaining_ms} | {"M"} mismatch.
local rec = KEYS[1]
local v = redis.call('HMGET', rec, 's', 'f', 't')
if not v[1] then
  redis.call('HSET', rec, 's', 'L', 'f', ARGV[1], 't', ARGV[2])
  redis.call('PEXPIRE', rec, ARGV[3])
  return {'A'}
end
if v[2] ~= ARGV[1] then
  return {'M'}
end
if v[1] == 'C' then
  return {'C', redis.call('HGET', rec, 'r')}
end
if v[3] == ARGV[2] then
  -- Our own claim, re-sent after a dropped connection: still ours.
  return {'A'}
end
return {'I', redis.call('PTTL', rec)}
