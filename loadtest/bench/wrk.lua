-- wrk script for `make bench` (loadtest/bench/run.sh): the same request on every path,
--   POST /v1/payments  Content-Type: application/json  Authorization: Bearer bench-tenant
--   {"amount":100,"currency":"eur"}
-- (Authorization is the gateway's default tenant header: keyed requests without one
-- are refused, and the bench runs the default.)
-- with an Idempotency-Key chosen per request:
--   wrk ... -s wrk.lua -- unique PREFIX       a fresh key per request: PREFIX-<thread>-<n>
--   wrk ... -s wrk.lua -- replay PREFIX N     a key drawn at random from PREFIX-0 .. PREFIX-(N-1)
--                                             (keys stored beforehand by seed.py)
-- The path is the URL's (the peer ldclabs/idempotent-proxy: /URL_UP), /v1/payments when
-- the URL has none.
-- Every answer is counted by kind (201 first execution, 201 with
-- `Idempotent-Replayed: true`, anything else), so each row can show that its answers are
-- the ones it claims to measure.
-- At the end it prints one JSON line (latencies in microseconds) that run.sh keeps.

local body = '{"amount":100,"currency":"eur"}'
local mode, prefix, nkeys = "unique", "bench", 1
local counter = 0
local nthreads = 0
local threads = {}
local path = "/v1/payments"

function setup(thread)
   nthreads = nthreads + 1
   thread:set("tid", nthreads)
   table.insert(threads, thread)
end

function init(args)
   mode = args[1] or "unique"
   prefix = args[2] or "bench"
   nkeys = tonumber(args[3] or "1")
   if mode == "unique" then
      prefix = prefix .. "-" .. tostring(tid)
   end
   if wrk.path ~= nil and wrk.path ~= "" and wrk.path ~= "/" then
      path = wrk.path
   end
   math.randomseed(tid * 7919 + os.time())
end

function request()
   local key
   if mode == "replay" then
      key = prefix .. "-" .. tostring(math.random(nkeys) - 1)
   else
      counter = counter + 1
      key = prefix .. "-" .. tostring(counter)
   end
   return wrk.format("POST", path, {
      ["Host"] = wrk.host .. ":" .. wrk.port,
      ["Content-Type"] = "application/json",
      ["Idempotency-Key"] = key,
      ["Authorization"] = "Bearer bench-tenant",
   }, body)
end

-- Per thread (globals, read by done() through thread:get).
ok_fresh, ok_replayed, other_status = 0, 0, 0

function response(status, headers, body)
   if status == 201 then
      local r = headers["idempotent-replayed"] or headers["Idempotent-Replayed"]
      if r == "true" then
         ok_replayed = ok_replayed + 1
      else
         ok_fresh = ok_fresh + 1
      end
   else
      other_status = other_status + 1
   end
end

function done(summary, latency, requests)
   local e = summary.errors
   local fresh, replayed, other = 0, 0, 0
   for _, t in ipairs(threads) do
      fresh = fresh + (t:get("ok_fresh") or 0)
      replayed = replayed + (t:get("ok_replayed") or 0)
      other = other + (t:get("other_status") or 0)
   end
   io.write(string.format(
      '{"requests":%d,"duration_us":%d,"bytes":%d,"rps":%.1f,' ..
      '"lat_p50_us":%d,"lat_p90_us":%d,"lat_p99_us":%d,"lat_p999_us":%d,"lat_max_us":%d,"lat_mean_us":%.1f,' ..
      '"err_connect":%d,"err_read":%d,"err_write":%d,"err_status":%d,"err_timeout":%d,' ..
      '"ok_fresh":%d,"ok_replayed":%d,"other_status":%d}\n',
      summary.requests, summary.duration, summary.bytes,
      summary.requests / (summary.duration / 1e6),
      latency:percentile(50), latency:percentile(90), latency:percentile(99),
      latency:percentile(99.9), latency.max, latency.mean,
      e.connect, e.read, e.write, e.status, e.timeout, fresh, replayed, other))
end
