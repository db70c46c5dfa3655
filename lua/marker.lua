-- idemgate warmth marker: since when has this Redis held every write?
-- KEYS[1] marker key. ARGV none.
-- Sets the marker to Redis' clock (ms) if absent (a new, restarted or flushed Redis).
-- Reply: the marker's age in ms (0 when just set).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local since = redis.call('GET', KEYS[1])
if not since then
  redis.call('SET', KEYS[1], now)
  return 0
end
return now - tonumber(since)
