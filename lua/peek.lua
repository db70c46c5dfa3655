-- idemgate peek: what a record holds now, without claiming it (read-only). Used by a
-- holder whose completion found its lease taken over, to answer its client with the
-- response every retry will get.
-- KEYS[1] record key. ARGV[1] fingerprint. Either layout (record.lua, prepended).
-- Reply: {"C", response, remaining_ms} completed with this fingerprint |
--        {"I", remaining_ms} leased | {"M"} another fingerprint | {"N"} absent.
local v = rec_get(KEYS[1])
if not v then
  return {'N'}
end
if v.f ~= ARGV[1] then
  return {'M'}
end
if v.s == 'C' then
  return {'C', v.r, redis.call('PTTL', KEYS[1])}
end
-- A lapsed lease reads as in flight for 0 ms: the next claim takes it over.
return {'I', (lease_left(KEYS[1], v))}
