-- idemgate invalidate: the admin API's delete, refused while a lease is held. The check
-- and the DEL are one script, so a claim cannot land between them.
-- KEYS[1] record key, KEYS[2] (optional) its live stream, deleted with the record (its
-- joiners find no record and are cut); ARGV[1] "1" to delete a leased record too (force),
-- "t" to delete one leased by the token ARGV[2] (an execution Postgres shows completed:
-- filled on replay, its lease stands in Redis), else "0".
-- Either layout (record.lua, prepended).
-- Reply: {"D"} deleted (completed, lapsed, or leased and forced, or leased by ARGV[2]) |
-- {"L", remaining_ms} leased, nothing deleted | {"A"} absent.
local rec = KEYS[1]
local v = rec_get(rec)
if not v then
  return {'A'}
end
if v.s ~= 'C' and ARGV[1] ~= '1' and not (ARGV[1] == 't' and v.t == ARGV[2]) then
  -- A lapsed lease needs no force: its holder went away mid-call.
  local left, lapsed = lease_left(rec, v)
  if not lapsed then
    return {'L', left}
  end
end
redis.call('DEL', rec)
if KEYS[2] then
  redis.call('DEL', KEYS[2])
end
return {'D'}
