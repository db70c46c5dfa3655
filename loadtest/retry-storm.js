// retry-storm.js: impatient clients. Each iteration pays with a new key against
// a slow upstream: the demo upstream's ?latency_ms= knob, drawn per key between
// LATENCY_MIN_MS and LATENCY_MAX_MS (default 50..300 ms), with a client timeout
// of CLIENT_TIMEOUT_MS (default 100 ms). Most first attempts time out and the
// client disconnects while the gateway is still forwarding; the client then
// retries the same request (same key, same path and query, same body: the query
// is part of the fingerprint) every RETRY_MS until it gets an answer: while the
// first execution is in flight the gateway answers 409
// idempotency_key_in_flight, afterwards it replays the stored 201.
//
//   k6 run loadtest/retry-storm.js
//   LATENCY_MIN_MS=400 LATENCY_MAX_MS=400 RETRY_MS=30 k6 run loadtest/retry-storm.js
//
// Expected per attempt: client timeout (status 0) on the short-timeout
// attempts, 409 idempotency_key_in_flight, or 201 for the key (with
// key_executions 1). Every key must end in a 201 within MAX_ATTEMPTS, and the
// upstream executes each key exactly once (checked in teardown).
import http from 'k6/http';
import { sleep } from 'k6';
import exec from 'k6/execution';
import { Counter, Rate } from 'k6/metrics';
import {
  API, BASE_URL, DURATION, JSON_HEADERS, checkExecutions, expectResponse, isPayment, isProblem,
  iterations, options as baseOptions, p99ms, replayed, startRun, vus,
} from './lib.js';

const LATENCY_MIN_MS = parseInt(__ENV.LATENCY_MIN_MS || '50', 10);
const LATENCY_MAX_MS = parseInt(__ENV.LATENCY_MAX_MS || '300', 10);
const CLIENT_TIMEOUT_MS = parseInt(__ENV.CLIENT_TIMEOUT_MS || '100', 10);
const RETRY_MS = parseInt(__ENV.RETRY_MS || '50', 10);
const MAX_ATTEMPTS = parseInt(__ENV.MAX_ATTEMPTS || '40', 10);
// Attempts after this many use a generous timeout, so a slow replay still lands.
const SHORT_ATTEMPTS = parseInt(__ENV.SHORT_ATTEMPTS || '10', 10);

const keysCompleted = new Rate('keys_completed');
const attemptsPerKey = new Counter('attempts');
const clientTimeouts = new Counter('client_timeouts');
const inFlight = new Counter('in_flight_409');
const replays = new Counter('replays');
const firstExecutions = new Counter('first_executions');

export const options = baseOptions({
  scenarios: {
    // Bounded in time (DURATION) and in count (ITERATIONS keys, each at most MAX_ATTEMPTS requests).
    retry_storm: {
      executor: 'shared-iterations',
      vus: vus(20),
      iterations: iterations(20000),
      maxDuration: DURATION,
      gracefulStop: '10s',
    },
  },
  thresholds: {
    keys_completed: ['rate>0.99'],
    // Answers (201, 409; k6 tags them expected_response:true, client timeouts false):
    // 409s and replays, and first executions that beat the client timeout.
    'http_req_duration{kind:api,expected_response:true}': [`p(99)<${p99ms(CLIENT_TIMEOUT_MS + 100)}`],
    // Most keys see the storm: a timed-out first attempt, then 409s, then the replay.
    client_timeouts: ['count>0'],
    in_flight_409: ['count>0'],
    replays: ['count>0'],
  },
});

export function setup() {
  return startRun('retry-storm');
}

export default function (data) {
  const key = `${data.prefix}-${exec.vu.idInTest}-${exec.vu.iterationInScenario}`;
  const latency = LATENCY_MIN_MS + Math.floor(Math.random() * (LATENCY_MAX_MS - LATENCY_MIN_MS + 1));
  const url = `${BASE_URL}/v1/payments?latency_ms=${latency}`;
  const body = JSON.stringify({ amount: 250, currency: 'eur', note: 'retry storm' });
  const headers = Object.assign({ 'Idempotency-Key': key }, JSON_HEADERS);
  let done = false;
  let attempt = 0;
  while (!done && attempt < MAX_ATTEMPTS) {
    attempt++;
    const short = attempt <= SHORT_ATTEMPTS;
    const res = http.post(url, body, {
      headers,
      timeout: short ? `${CLIENT_TIMEOUT_MS}ms` : '10s',
      tags: Object.assign({ name: 'POST /v1/payments (retry storm)' }, API),
      // 409 is an expected answer here; a client timeout (status 0) always counts as failed in k6.
      responseCallback: http.expectedStatuses(201, 409),
    });
    if (res.status === 0) {
      // The client gave up; fine while the attempt was a short one.
      clientTimeouts.add(1);
      expectResponse(res, short && /timeout/i.test(res.error || ''), 'client timeout on a short attempt');
    } else {
      if (res.status === 201) {
        const ok = isPayment(res, key) && (replayed(res) === 'true' || replayed(res) === 'false');
        expectResponse(res, ok, '201 for the key');
        if (replayed(res) === 'true') replays.add(1);
        if (replayed(res) === 'false') firstExecutions.add(1);
        done = ok;
        if (!ok) break;
      } else {
        const ok = isProblem(res, 409, 'idempotency_key_in_flight');
        expectResponse(res, ok, '409 idempotency_key_in_flight');
        if (ok) inFlight.add(1);
      }
    }
    if (!done) sleep(RETRY_MS / 1000);
  }
  attemptsPerKey.add(attempt);
  keysCompleted.add(done);
}

export function teardown() {
  checkExecutions('retry-storm');
}
