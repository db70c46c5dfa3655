// k6 script for `make bench` (loadtest/bench/run.sh): latency at a fixed, moderate
// arrival rate (open model: k6 starts RATE requests per second whatever the
// answers' latency, so a slow answer cannot hide the ones behind it).
// The same request as wrk.lua: POST /v1/payments, {"amount":100,"currency":"eur"}.
//
// Environment: TARGET (http://127.0.0.1:PORT), RATE (req/s), DURATION ("10s"),
//   MODE ("unique": a fresh Idempotency-Key per request; "replay": keys drawn from
//   PREFIX-0 .. PREFIX-(NKEYS-1), stored beforehand by seed.py; "pairs": every other
//   request a fresh key, the others a retry of the key sent NKEYS fresh keys earlier),
//   PREFIX, NKEYS,
//   OUT (where handleSummary writes its JSON), REQ_PATH (default /v1/payments; the
//   peer ldclabs/idempotent-proxy is reached at /URL_UP).
import http from 'k6/http';
import exec from 'k6/execution';

const TARGET = __ENV.TARGET;
const MODE = __ENV.MODE || 'unique';
const PREFIX = __ENV.PREFIX || 'lat';
const NKEYS = parseInt(__ENV.NKEYS || '1', 10);
const BODY = '{"amount":100,"currency":"eur"}';
const REQ_PATH = __ENV.REQ_PATH || '/v1/payments';

// Anything but 201 Created counts in http_req_failed (reported as failed_rate).
http.setResponseCallback(http.expectedStatuses(201));

export const options = {
  discardResponseBodies: true,
  summaryTrendStats: ['min', 'med', 'avg', 'p(90)', 'p(99)', 'p(99.9)', 'max'],
  scenarios: {
    fixed: {
      executor: 'constant-arrival-rate',
      rate: parseInt(__ENV.RATE || '400', 10),
      timeUnit: '1s',
      duration: __ENV.DURATION || '10s',
      // Every VU ready before the first request: one started mid-run came too late
      // when answers slowed to ~200 ms (about 80 in flight at 400 req/s), and k6
      // dropped iterations. 200 cover answers of up to 0.5 s at 400 req/s.
      preAllocatedVUs: 200,
      maxVUs: 200,
    },
  },
};

export default function () {
  const n = exec.scenario.iterationInTest;
  let key = `${PREFIX}-${n}`;
  if (MODE === 'replay') {
    key = `${PREFIX}-${Math.floor(Math.random() * NKEYS)}`;
  } else if (MODE === 'pairs') {
    // Fresh keys are PREFIX-0, PREFIX-2, ...: an odd request retries the one sent
    // NKEYS fresh keys earlier (a fresh key of its own while there is none).
    key = n % 2 === 0 || n < 2 * NKEYS + 1 ? `${PREFIX}-${n}` : `${PREFIX}-${n - 1 - 2 * NKEYS}`;
  }
  http.post(`${TARGET}${REQ_PATH}`, BODY, {
    headers: {
      'Content-Type': 'application/json',
      'Idempotency-Key': key,
      Authorization: 'Bearer bench-tenant',
    },
    timeout: '5s',
  });
}

export function handleSummary(data) {
  const d = data.metrics.http_req_duration.values;
  const failed = data.metrics.http_req_failed ? data.metrics.http_req_failed.values.rate : 0;
  const dropped = data.metrics.dropped_iterations ? data.metrics.dropped_iterations.values.count : 0;
  const reqs = data.metrics.http_reqs.values.count;
  const out = {
    requests: reqs,
    rps: data.metrics.http_reqs.values.rate,
    failed_rate: failed,
    dropped_iterations: dropped,
    p50_ms: d.med,
    p90_ms: d['p(90)'],
    p99_ms: d['p(99)'],
    p999_ms: d['p(99.9)'],
    max_ms: d.max,
    avg_ms: d.avg,
  };
  return { [__ENV.OUT]: JSON.stringify(out) + '\n', stdout: JSON.stringify(out) + '\n' };
}
