-- idemgate claim: take the lease on a record, or report what holds it.
-- KEYS[1] record key, KEYS[2] fence key (same hash tag), KEYS[3] warmth marker of the
-- record's hash slot (same slot, see src/store/redis/slots.rs).
-- ARGV[1] fingerprint, ARGV[2] lock token, ARGV[3] the new record's ttl in ms (the lease,
-- plus with vouched claims ARGV[9]: summed by the gateway, so no number is formatted
-- here), ARGV[4] fence key ttl in ms,
-- or "clock": the fence is Redis' clock in µs, no fence key (vouched claims), or "0": no fence key (write-through claims: Postgres' fence is the fencing token, and
-- the record carries "0"), ARGV[5] the age (ms) from which the marker vouches for this
-- shard (the longest ttl), or "" where the mode does not use the marker's verdict,
-- ARGV[6] "hash" to write a new record in the previous layout
-- (`redis.record_format`; anything else or nothing: one string).
-- The marker is read only where the gateway's mode uses the verdict (`[postgres]` with
-- claims in Redis: not Redis alone, not write-through claims); KEYS[3] is given
-- where it is read, and wherever KEYS[4] is.
-- Record: see record.lua (prepended): s = "L" (leased) | "C" (completed), f = fingerprint,
-- t = token, n = fencing token, r = response, w = once a duplicate was told "in flight"
-- (it may be waiting: complete.lua and release.lua publish the wake-up only then).
-- Commands of a first claim: GET, TIME, SET fence ... GET, SET record (GET and SET
-- only without the fence key and the markers; with the epoch marker one GET more, and
-- TIME only once its slot lost data).
-- Marker: "<since ms>", Redis' clock when this slot was first seen without a valid
-- marker (new, restarted, flushed, reset by a replica that knows Redis lacks a record).
-- It vouches only in the server process that wrote it: a copy (replicated to a replica
-- later promoted, loaded from an RDB/AOF file at a restart or a restore, moved by a
-- resharding) proves nothing about the writes after it, so it is renewed and the slot
-- counts cold for the longest ttl. The proof of origin is the value's encoding: the
-- value is a number (Redis stores it "int"), and the writer then turns its own copy
-- "raw" with an APPEND of nothing that is neither replicated nor written to the AOF
-- (REPL_NONE). A replica, a reload or a restore rebuilds the value from its bytes as
-- "int" (or "embstr"): only the writing process holds it "raw". One O(1) OBJECT
-- ENCODING, read only once the marker is old enough to vouch, instead of INFO server.
-- Read here, in the same atomic step as the claim, so no probe interval separates a
-- flush or a failover from the claims that must notice it.
-- KEYS[4] (every mode with `[postgres]`): the epoch marker of the record's slot,
-- "<since ms>": Redis' clock when a claim first found the slot without one. It is
-- an ordinary key, replicated and kept in the AOF like the records, so it survives what
-- keeps them (a restart from an AOF written with `appendfsync always`, a failover to a
-- replica that acknowledged them) and goes with what loses them (a flush, a restart
-- without the AOF, a new server). The gateway writes "0" into every slot once per
-- deployment, and records that in Postgres once a primary is seen to fsync every write,
-- before any claim is kept by Redis alone (src/store/redis/epochs.rs). Every mode reads
-- it, so that a fleet mixing vouched and other claims honours a loss alike.
-- ARGV[7] (with KEYS[4]): the quarantine in ms. ARGV[8] (with KEYS[4]): a marker set
-- at or before this moment (ms; 0: none) marks a loss that lost no claim kept by Redis
-- alone (Postgres showed the deployment had kept none yet, src/store/redis/claim.rs):
-- no quarantine for it. ARGV[9] (vouched claims): how long the record outlives its
-- lease (l, record.lua), so that a lease that ran out with no completion is seen as
-- lapsed and taken over knowingly, as a Postgres row would be.
-- ARGV[10] (vouched claims): "1" to ask before taking over a lapsed lease: the reply is
-- then {"P", token, lapsed_ms} and nothing is written (its holder may have completed in
-- Postgres alone, `redis_fill = "on_replay"`: the gateway looks it up, re-warms the
-- record under that token if so, and else claims again with that token here); a token:
-- take over the lapsed lease of that token only (another one answers "P" again); "0":
-- take any lapsed lease over.
-- Reply: {"A", fence, marker_age_ms[, 1]} acquired (age 0 without KEYS[3]; 1: it took
-- over a lease that had lapsed) | {"P", token, lapsed_ms} a lapsed lease of that token,
-- its lease over for that long (ARGV[10]) |
--        {"Y", remaining_ms, since[, 1]} the key is absent from a slot that lost its
--        data lately (its marker set at `since`): treat it as in flight for that long
--        (nothing written); 1 when this claim found the marker missing and set it (the
--        gateway then sets the markers of the shard's other slots to it) |
--        {"C", response, remaining_ms} | {"I", remaining_ms} | {"M"} mismatch.
local rec = KEYS[1]
local function clock_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function mark(since_ms)
  redis.call('SET', KEYS[3], string.format('%d', since_ms))
  redis.set_repl(redis.REPL_NONE)
  redis.call('APPEND', KEYS[3], '')
  redis.set_repl(redis.REPL_ALL)
end
local function marker_age(now_us)
  if not KEYS[3] or ARGV[5] == '' then
    return 0
  end
  local now_ms = math.floor((now_us or clock_us()) / 1000)
  local m = redis.call('GET', KEYS[3])
  local since = tonumber(m)
  if since then
    local age = now_ms - since
    -- Young: cold either way; the origin is checked once the age would vouch.
    if age <= tonumber(ARGV[5]) or redis.call('OBJECT', 'ENCODING', KEYS[3]) == 'raw' then
      return age
    end
  elseif m then
    -- The earlier format, "<since> <run_id>": kept once if this process wrote it.
    local old, id = string.match(m, '^(%d+) (%x+)$')
    if old and id == string.match(redis.call('INFO', 'server'), 'run_id:(%x+)') then
      mark(tonumber(old))
      return now_ms - tonumber(old)
    end
  end
  mark(now_ms)
  return 0
end
-- Takes the lease: a new record under this token (`lapsed`: it replaces a lease that
-- ran out with no completion). Fencing token: grows per key across takeovers, and
-- across a lost fence key too (it is at least Redis' clock in microseconds; takeovers
-- are a lease apart). max(previous + 1, now): the clock is written with SET ... GET
-- (Redis 6.2+), and only if it is not past the previous token (a clock behind it)
-- written again.
local function acquire(now_us, lapsed)
  local ns = '0'
  if ARGV[4] == 'clock' then
    -- Vouched claims: Redis' clock alone, no fence key to write, replicate and fsync.
    -- It grows across takeovers, which are a lease apart, unless the clock of the
    -- server that answers steps back by more than a lease.
    now_us = now_us or clock_us()
    ns = string.format('%d', now_us)
  elseif ARGV[4] ~= '0' then
    now_us = now_us or clock_us()
    ns = string.format('%d', now_us)
    local prev = redis.call('SET', KEYS[2], ns, 'PX', ARGV[4], 'GET')
    if prev and tonumber(prev) >= now_us then
      ns = string.format('%d', tonumber(prev) + 1)
      redis.call('SET', KEYS[2], ns, 'PX', ARGV[4])
    end
  end
  -- Vouched claims (ARGV[9]): the record outlives its lease by l ms (record.lua), and
  -- ARGV[3] counts them: the caller sends at least lease + l, or the lease has lapsed.
  rec_put(rec, ARGV[6] == 'hash', false, 'L', false, ARGV[1], ARGV[2], ns, ARGV[9], ARGV[3])
  if lapsed then
    return {'A', ns, marker_age(now_us), 1}
  end
  return {'A', ns, marker_age(now_us)}
end
local v = rec_get(rec)
if not v then
  -- A slot whose epoch marker is younger than the quarantine (ARGV[7]) lost its data
  -- lately: a lease it held may still run, and its holder writes it back at its next
  -- heartbeat (extend.lua). Until then the key is treated as in flight, and nothing is
  -- written, so that write-back (or the holder's completion) finds the record free.
  local t0 = nil
  local since = KEYS[4] and tonumber(redis.call('GET', KEYS[4]))
  -- "0": a slot that lost nothing since the deployment wrote it (no clock to read).
  if KEYS[4] and since ~= 0 then
    t0 = clock_us()
    local now_ms = math.floor(t0 / 1000)
    -- A marker this claim sets is a loss of its own, never a known one.
    if not since then
      redis.call('SET', KEYS[4], string.format('%d', now_ms))
      return {'Y', tonumber(ARGV[7]), now_ms, 1}
    end
    local age = now_ms - since
    if age < tonumber(ARGV[7]) and since > tonumber(ARGV[8]) then
      return {'Y', tonumber(ARGV[7]) - age, since}
    end
  end
  return acquire(t0, nil)
end
if v.f ~= ARGV[1] then
  return {'M'}
end
if v.s == 'C' then
  return {'C', v.r, redis.call('PTTL', rec)}
end
if v.t == ARGV[2] then
  -- Our own claim, re-sent after a dropped connection: still ours.
  return {'A', v.n, marker_age(nil)}
end
local left, lapsed = lease_left(rec, v)
if lapsed and ARGV[10] and ARGV[10] ~= '0' and ARGV[10] ~= v.t then
  return {'P', v.t, v.l - redis.call('PTTL', rec)}
end
if lapsed then
  -- Its holder went away mid-call: taken over, and the reply says so (the gateway then
  -- settles the key as an unknown outcome rather than running it again, `on_ambiguous`).
  if v.hash then
    redis.call('DEL', rec)
  end
  return acquire(nil, 1)
end
-- Told "in flight": this caller may wait for the holder. Marked in the same atomic step,
-- so a completion or release after this reply publishes (a waiter subscribes before it
-- claims), and one before it was seen by this claim.
if not v.w then
  rec_mark_waited(rec, v)
end
return {'I', left}
