// duplicate-burst.js: many virtual users fire the same key at the same moment.
// Time is cut into slots of SLOT_MS (default 200 ms); at the start of each slot
// every VU sends the same request (same key, path, query and body, derived from
// the slot number), so the burst lands on every replica behind the load
// balancer at once and the replicas race for the claim in Redis. The upstream
// answers after LATENCY_MS (default 50 ms), so most of the burst overlaps the
// first execution. A VU that gets 409 retries after RETRY_MS until it gets the
// stored response.
//
//   k6 run loadtest/duplicate-burst.js
//   VUS=40 SLOT_MS=300 k6 run loadtest/duplicate-burst.js
//
// Expected: per key, one first execution (201, Idempotent-Replayed: false); the
// rest 409 idempotency_key_in_flight or the replayed 201; every 201 carries
// key_executions 1, and the upstream executes each key exactly once (teardown).
import http from 'k6/http';
import { sleep } from 'k6';
import { Counter, Rate } from 'k6/metrics';
import {
  API, BASE_URL, DURATION, JSON_HEADERS, checkExecutions, expectResponse, isPayment, isProblem,
  iterations, options as baseOptions, p99ms, replayed, startRun, vus,
} from './lib.js';

const SLOT_MS = parseInt(__ENV.SLOT_MS || '200', 10);
const LATENCY_MS = parseInt(__ENV.LATENCY_MS || '50', 10);
const RETRY_MS = parseInt(__ENV.RETRY_MS || '50', 10);
const MAX_ATTEMPTS = parseInt(__ENV.MAX_ATTEMPTS || '20', 10);

const keysCompleted = new Rate('keys_completed');
const firstExecutions = new Counter('first_executions');
const inFlight = new Counter('in_flight_409');
const replays = new Counter('replays');

export const options = baseOptions({
  scenarios: {
    // Bounded in time (DURATION) and in count (ITERATIONS, each at most MAX_ATTEMPTS requests).
    duplicate_burst: {
      executor: 'shared-iterations',
      vus: vus(30),
      iterations: iterations(50000),
      maxDuration: DURATION,
      gracefulStop: '5s',
    },
  },
  thresholds: {
    'http_req_failed{kind:api}': ['rate<0.01'],
    'http_req_duration{kind:api}': [`p(99)<${p99ms(LATENCY_MS + 150)}`],
    keys_completed: ['rate>0.99'],
  },
});

export function setup() {
  return startRun('duplicate-burst');
}

export default function (data) {
  // Wait for the start of the next slot; every VU waiting for it wakes together.
  const now = Date.now();
  const slot = Math.floor(now / SLOT_MS) + 1;
  sleep((slot * SLOT_MS - now) / 1000);

  const key = `${data.prefix}-${slot}`;
  const url = `${BASE_URL}/v1/payments?latency_ms=${LATENCY_MS}`;
  const body = JSON.stringify({ amount: slot % 10000, currency: 'eur', note: 'duplicate burst' });
  const params = {
    headers: Object.assign({ 'Idempotency-Key': key }, JSON_HEADERS),
    tags: Object.assign({ name: 'POST /v1/payments (burst)' }, API),
    responseCallback: http.expectedStatuses(201, 409),
  };
  let done = false;
  for (let attempt = 1; !done && attempt <= MAX_ATTEMPTS; attempt++) {
    if (attempt > 1) sleep(RETRY_MS / 1000);
    const res = http.post(url, body, params);
    if (res.status === 201) {
      const r = replayed(res);
      const ok = isPayment(res, key) && (r === 'true' || r === 'false');
      expectResponse(res, ok, '201 for the key');
      if (r === 'false') firstExecutions.add(1);
      if (r === 'true') replays.add(1);
      done = ok;
      if (!ok) break;
    } else if (res.status === 409) {
      const ok = isProblem(res, 409, 'idempotency_key_in_flight');
      expectResponse(res, ok, '409 idempotency_key_in_flight');
      if (ok) inFlight.add(1);
      else break;
    } else {
      expectResponse(res, false, '201 or 409');
      break;
    }
  }
  keysCompleted.add(done);
}

export function teardown() {
  checkExecutions('duplicate-burst');
}
