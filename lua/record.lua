-- idemgate record: how the scripts read and write a record. Prepended to claim, complete,
-- release, extend, peek and invalidate (src/store/redis/mod.rs, `record_script!`).
-- Layout 3 (this release): ONE string, with the record's expiry (`SET key value PX ms`),
-- read with one GET:
--   byte 1  state, also the layout's tag: "L" leased | "C" completed
--   byte 2  w: "1" once a duplicate was told "in flight" (claim.lua), else "0"; flipped
--           in place by `SETRANGE key 1 1`, which keeps the TTL and the rest
--   then    three length-prefixed fields, each one byte (its length, 0-255) and its bytes:
--           f fingerprint (32 raw bytes from the gateway), t lock token, n fencing token
--           (decimal; "0" when the claim kept no fence key, empty for a record completed
--           after it had expired)
--   then    r the encoded response, to the end; while leased, empty, or (vouched claims)
--           l: how long, in ms, the record outlives its lease (decimal), so that a lease
--           that ran out with no completion is still seen, as lapsed, for that long.
--           The key then expires l ms after its lease ends; a heartbeat keeps that.
-- Layout 2 (the previous release): a hash {s, f, t, n, r, w}, same meanings. Read here
-- too: GET answers WRONGTYPE (redis.pcall: an error table) only for such a record, and
-- only then is it read with HMGET. It is written (`redis.record_format = "hash"`, an
-- ARGV flag of claim.lua and complete.lua) only during a rolling upgrade from the
-- previous release, whose scripts read hashes only.
local function rec_get(k)
  local v = redis.pcall('GET', k)
  if type(v) == 'table' then
    local h = redis.call('HMGET', k, 's', 'f', 't', 'n', 'w', 'r')
    if not h[1] then
      return nil
    end
    local rec = {s = h[1], f = h[2], t = h[3], n = h[4], w = h[5], hash = true}
    if rec.s == 'C' then
      rec.r = h[6]
    else
      rec.l = tonumber(h[6])
    end
    return rec
  end
  if not v then
    return nil
  end
  local byte, sub = string.byte, string.sub
  local a = 4 + byte(v, 3)
  local b = a + 1 + byte(v, a)
  local c = b + 1 + byte(v, b)
  local rec = {s = sub(v, 1, 1), w = byte(v, 2) == 49, f = sub(v, 4, a - 1),
    t = sub(v, a + 1, b - 1), n = sub(v, b + 1, c - 1)}
  if rec.s == 'C' then
    rec.r = sub(v, c)
  elseif c <= #v then
    rec.l = tonumber(sub(v, c))
  end
  return rec
end
-- Completes a leased record of this layout (`v`, its string) in place, without decoding
-- it: the state byte becomes "C" and the tail (l, or nothing) the response `r`; w, f, t
-- and n stay byte for byte as they were, as rec_put would write them again. Returns 0
-- when another token holds or completed the record, else 1 (a record this token completed already
-- is left as it is); then whether a duplicate was told "in flight" (w): the caller
-- publishes the wake-up.
local function rec_complete_string(k, v, token, r, ttl)
  local byte, sub = string.byte, string.sub
  local a = 4 + byte(v, 3)
  local b = a + 1 + byte(v, a)
  if sub(v, a + 1, b - 1) ~= token then
    return 0, false
  end
  if byte(v, 1) ~= 76 then
    return 1, false
  end
  local c = b + 1 + byte(v, b)
  redis.call('SET', k, 'C' .. sub(v, 2, c - 1) .. r, 'PX', ttl)
  return 1, byte(v, 2) == 49
end
-- A leased record's lease: the ms left, and whether it lapsed (ran out with no
-- completion, remembered for l ms after: only records that carry l can say so).
local function lease_left(k, rec)
  local pttl = redis.call('PTTL', k)
  if not rec.l then
    return pttl, false
  end
  local left = pttl - rec.l
  if left <= 0 then
    return 0, true
  end
  return left, false
end
-- Writes a whole record with its expiry (ttl ms): one string, or a hash when `hash`
-- (`was_string`: the key holds a string record to be replaced).
local function rec_put(k, hash, was_string, s, w, f, t, n, r, ttl)
  if hash then
    if was_string then
      redis.call('DEL', k)
    end
    local a = {'s', s, 'f', f, 't', t}
    if n and n ~= '' then
      a[#a + 1] = 'n'
      a[#a + 1] = n
    end
    if r then
      a[#a + 1] = 'r'
      a[#a + 1] = r
    end
    if w and was_string then
      a[#a + 1] = 'w'
      a[#a + 1] = '1'
    end
    redis.call('HSET', k, unpack(a))
    redis.call('PEXPIRE', k, ttl)
    return
  end
  local v = s .. (w and '1' or '0') .. string.char(#f) .. f .. string.char(#t) .. t
    .. string.char(#n) .. n .. (r or '')
  redis.call('SET', k, v, 'PX', ttl)
end
-- Marks a record as waited for (w), in its own layout, keeping its TTL.
local function rec_mark_waited(k, rec)
  if rec.hash then
    redis.call('HSET', k, 'w', '1')
  else
    redis.call('SETRANGE', k, 1, '1')
  end
end
