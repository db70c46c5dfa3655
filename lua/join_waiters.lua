-- idemgate join_waiters: join the fleet-wide waiters of a key, unless there are too many.
-- KEYS[1] waiters set (a sorted set: member = waiter id, score = when it lapses, ms).
-- ARGV[1] max waiters, ARGV[2] waiter id, ARGV[3] how long a member may stay, ms.
-- Members that lapsed (their replica died before leaving) are dropped first, so a
-- waiter that never left costs a slot for ARGV[3] at most, and nothing goes negative.
-- A member that calls again before it lapsed is renewed for ARGV[3] (a joiner stays
-- counted as long as it is attached).
-- Reply: 1 joined or renewed (leave with ZREM of the id) | 0 refused (cap reached).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
-- A member already there renews its place (a joiner still attached): the cap counted it.
if not redis.call('ZSCORE', KEYS[1], ARGV[2]) and
    redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
local lapse = now + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], lapse, ARGV[2])
-- The set lives as long as its longest-lived member.
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return 1
