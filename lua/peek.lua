-- idemgate peek: what a record holds now, without claiming it (read-only). Used by a
-- holder whose completion found its lease taken over, to answer its client with the
-- response every retry will get.
-- KEYS[1] record key. ARGV[1] fingerprint.
-- Reply: {"C", response, remaining_ms} completed with this fingerprint |
--        {"I", remaining_ms} leased | {"M"} another fingerprint | {"N"} absent.
local v = redis.call('HMGET', KEYS[1], 's', 'f')
if not v[1] then
  return {'N'}
end
if v[2] ~= ARGV[1] then
  return {'M'}
end
if v[1] == 'C' then
  return {'C', redis.call('HGET', KEYS[1], 'r'), redis.call('PTTL', KEYS[1])}
end
return {'I', redis.call('PTTL', KEYS[1])}
