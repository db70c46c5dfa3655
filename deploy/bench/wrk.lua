-- wrk script for `make bench` (deploy/bench/run.sh): the same request on every path,
--   POST /v1/payments  Content-Type: application/json  {"amount":100,"currency":"eur"}
-- with an Idempotency-Key chosen per request:
--   wrk ... -s wrk.lua -- unique PREFIX       a fresh key per request: PREFIX-<thread>-<n>
--   wrk ... -s wrk.lua -- replay PREFIX N     a key drawn at random from PREFIX-0 .. PREFIX-(N-1)
--                                             (keys stored beforehand by seed.py)
-- The path is the URL's (the peer ldclabs/idempotent-proxy: /URL_UP), /v1/payments when
-- the URL has none.
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
   }, body)
end

function done(summary, latency, requests)
   local e = summary.errors
   io.write(string.format(
      '{"requests":%d,"duration_us":%d,"bytes":%d,"rps":%.1f,' ..
      '"lat_p50_us":%d,"lat_p90_us":%d,"lat_p99_us":%d,"lat_p999_us":%d,"lat_max_us":%d,"lat_mean_us":%.1f,' ..
      '"err_connect":%d,"err_read":%d,"err_write":%d,"err_status":%d,"err_timeout":%d}\n',
      summary.requests, summary.duration, summary.bytes,
      summary.requests / (summary.duration / 1e6),
      latency:percentile(50), latency:percentile(90), latency:percentile(99),
      latency:percentile(99.9), latency.max, latency.mean,
      e.connect, e.read, e.write, e.status, e.timeout))
end
