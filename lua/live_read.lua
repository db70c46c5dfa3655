-- idemgate live_read: read the live stream of a keyed answer, only while it is the
-- stream of the execution that holds (or completed) the record, so that a joiner never
-- follows what an earlier execution of the key left: one that was released, expired,
-- invalidated or taken over (src/store/tiers/live.rs).
-- KEYS[1] record key, KEYS[2] its live stream (`<record key>:live`, same hash slot).
-- ARGV[1] the stream's owner as the caller read it before (the SHA-1 of the lock token
-- live.lua wrote into the head), or '' to start: then the record must be leased and
-- the stream's head name its holder, and the reply starts with the head;
-- ARGV[2] read after this entry id ('-' to start), ARGV[3] at most this many entries.
-- The record (either layout) is prepended from record.lua.
-- Reply: {'G'} gone: no record, or held by another execution, or no stream (expired,
-- deleted), or (to start) not leased or its head not its holder's |
-- {owner, state ('L' leased | 'C' completed), id, field, value, id, field, value, ...}
-- the entries after ARGV[2] (the head's field 'h', its owner left out).
local v = rec_get(KEYS[1])
if not v then
  return {'G'}
end
local owner = redis.sha1hex(v.t)
if ARGV[1] == '' then
  if v.s ~= 'L' then
    return {'G'}
  end
elseif ARGV[1] ~= owner then
  return {'G'}
end
local start = '-'
if ARGV[2] ~= '-' then
  start = '(' .. ARGV[2]
end
local read = redis.call('XRANGE', KEYS[2], start, '+', 'COUNT', ARGV[3])
if #read == 0 and redis.call('EXISTS', KEYS[2]) == 0 then
  return {'G'}
end
local reply = {owner, v.s}
for i, entry in ipairs(read) do
  local fields = entry[2]
  if fields[1] == 'h' then
    local by = nil
    for j = 3, #fields - 1, 2 do
      if fields[j] == 'o' then
        by = fields[j + 1]
      end
    end
    -- A head without this owner (an earlier release's, or an earlier execution's
    -- stream) is not this execution's.
    if by ~= owner then
      return {'G'}
    end
  elseif i == 1 and ARGV[1] == '' then
    return {'G'}
  end
  reply[#reply + 1] = entry[1]
  reply[#reply + 1] = fields[1]
  reply[#reply + 1] = fields[2]
end
return reply
