-- idemgate release: drop the lease so a retry runs again, only if the caller holds it,
-- and wake the duplicates that may be waiting on it (one of them may now take the key):
-- published only when a duplicate was told "in flight" (w, set by claim.lua).
-- KEYS[1] record key, KEYS[2] (optional) its live stream, deleted with the lease (same
-- hash slot); ARGV[1] lock token, ARGV[2] completion channel, ARGV[3] 'PUBLISH',
-- or 'SPUBLISH' in a cluster (sharded pub/sub, in the record's slot). Either layout
-- (record.lua, prepended).
-- Reply: 1 released (or already gone) | 0 not ours (completed, or leased by another token).
local rec = KEYS[1]
local v = rec_get(rec)
if not v then
  return 1
end
if v.s == 'L' and v.t == ARGV[1] then
  redis.call('DEL', rec)
  if v.w then
    -- This execution's live stream, written only once a duplicate was told "in flight"
    -- (w). A stream an earlier execution left without w is not deleted here: it
    -- expires, and joiners never read it (live_read.lua checks its owner).
    if KEYS[2] then
      redis.call('DEL', KEYS[2])
    end
    redis.call(ARGV[3], ARGV[2], 'R')
  end
  return 1
end
return 0
