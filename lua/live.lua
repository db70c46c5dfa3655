-- idemgate live: append to the live stream of a keyed answer that is still running,
-- for the duplicates that join it (src/flow/live). The stream is written only once a
-- duplicate was told "in flight" (w, set by claim.lua) or once it exists, and only by
-- the lease's holder.
-- KEYS[1] record key, KEYS[2] its live stream (`<record key>:live`, same hash slot).
-- ARGV[1] lock token, ARGV[2] how long the stream lives after this call (ms),
-- ARGV[3] completion channel, ARGV[4] 'PUBLISH', or 'SPUBLISH' in a cluster,
-- ARGV[5..] the entries: field, value pairs ('h' head, 'd' data, 'e' end, 'x' aborted),
-- each XADDed as one entry (the head with its owner, below); none: only the stream's
-- life is pushed out.
-- The record (either layout) is prepended from record.lua.
-- Every call that writes publishes 'L' on the channel, waking the joiners.
-- Reply: 1 written (or nothing to write) | 2 nobody joins: nothing written, the
-- entries stay with the caller | 0 not ours any more (expired, taken over, completed).
local v = rec_get(KEYS[1])
if not v or v.s ~= 'L' or v.t ~= ARGV[1] then
  return 0
end
local exists = redis.call('EXISTS', KEYS[2]) == 1
if not exists and not v.w then
  return 2
end
if #ARGV < 5 then
  if exists then
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
  end
  return 1
end
-- A head starts the stream afresh: what an earlier execution of the key left (it was
-- released, or its replica died) is never read as this one's. The head names its
-- execution ('o': the SHA-1 of the lock token), so a reader follows this stream only
-- while the record is held or completed by that token (live_read.lua).
local from = 5
if ARGV[5] == 'h' then
  redis.call('DEL', KEYS[2])
  redis.call('XADD', KEYS[2], '*', 'h', ARGV[6], 'o', redis.sha1hex(ARGV[1]))
  from = 7
end
for i = from, #ARGV - 1, 2 do
  redis.call('XADD', KEYS[2], '*', ARGV[i], ARGV[i + 1])
end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
redis.call(ARGV[4], ARGV[3], 'L')
return 1
