// new-keys.js: every request carries a fresh Idempotency-Key, so every request
// is a first execution (claim in Redis, forward, store, write through to
// Postgres). Closed model: VUS virtual users send back to back for DURATION.
//
//   k6 run loadtest/new-keys.js                 # against make up's HAProxy
//   BASE_URL=http://127.0.0.1:8081 DURATION=10s VUS=4 k6 run loadtest/new-keys.js
//
// Expected: 201 with Idempotent-Replayed: false for every request; the upstream
// executes each key exactly once (checked in teardown).
import http from 'k6/http';
import exec from 'k6/execution';
import {
  API, BASE_URL, DURATION, JSON_HEADERS, checkExecutions, expectResponse, isPayment,
  iterations, options as baseOptions, p99ms, replayed, startRun, vus,
} from './lib.js';

export const options = baseOptions({
  scenarios: {
    // Bounded in time (DURATION) and in count (ITERATIONS, default 200000).
    new_keys: {
      executor: 'shared-iterations',
      vus: vus(8),
      iterations: iterations(200000),
      maxDuration: DURATION,
      gracefulStop: '5s',
    },
  },
  thresholds: {
    'http_req_failed{kind:api}': ['rate<0.01'],
    'http_req_duration{kind:api}': [`p(99)<${p99ms(150)}`],
    checks: ['rate>0.99'],
  },
});

export function setup() {
  return startRun('new-keys');
}

export default function (data) {
  const key = `${data.prefix}-${exec.vu.idInTest}-${exec.vu.iterationInScenario}`;
  const body = JSON.stringify({ amount: 100 + (exec.vu.iterationInScenario % 900), currency: 'eur' });
  const res = http.post(`${BASE_URL}/v1/payments`, body, {
    headers: Object.assign({ 'Idempotency-Key': key }, JSON_HEADERS),
    tags: Object.assign({ name: 'POST /v1/payments (new key)' }, API),
  });
  expectResponse(res, isPayment(res, key) && replayed(res) === 'false', '201 first execution');
}

export function teardown() {
  checkExecutions('new-keys');
}
