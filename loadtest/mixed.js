// mixed.js: a realistic mix from several tenants (Authorization header, the
// gateway's scope) at a fixed arrival rate (RATE per second, default 300):
//   70%  a payment with a new key                  -> 201, Idempotent-Replayed: false
//   10%  a retry of one of this VU's recent payments -> the replayed 201, byte for byte
//    5%  a double submit: the same new request twice at once (http.batch)
//                                                  -> one 201 first execution, the other
//                                                     409 in flight or the replayed 201
//    5%  a recent key reused with a different body -> 422 idempotency_key_reused
//   10%  a read (GET, no key)                      -> 200, proxied untouched
//
//   k6 run loadtest/mixed.js
//   RATE=500 DURATION=60s k6 run loadtest/mixed.js
//
// The upstream executes each key exactly once (checked in teardown).
import http from 'k6/http';
import exec from 'k6/execution';
import { Counter } from 'k6/metrics';
import {
  API, BASE_URL, DURATION, JSON_HEADERS, checkExecutions, expectResponse, isPayment, isProblem,
  options as baseOptions, p99ms, replayed, startRun, vus,
} from './lib.js';

const RATE = parseInt(__ENV.RATE || '300', 10);
const TENANTS = 3;
const RECENT = 20; // recent payments each VU remembers for retries and conflicts

const outcomes = new Counter('outcomes');

export const options = baseOptions({
  scenarios: {
    mixed: {
      executor: 'constant-arrival-rate',
      rate: RATE,
      timeUnit: '1s',
      duration: DURATION,
      preAllocatedVUs: vus(20),
      maxVUs: vus(20) * 2,
      gracefulStop: '5s',
    },
  },
  thresholds: {
    'http_req_failed{kind:api}': ['rate<0.01'],
    'http_req_duration{kind:api}': [`p(99)<${p99ms(150)}`],
    checks: ['rate>0.99'],
    'outcomes{outcome:conflict_422}': ['count>0'],
    'outcomes{outcome:replay}': ['count>0'],
    dropped_iterations: [`count<${Math.max(10, RATE)}`],
  },
});

export function setup() {
  return startRun('mixed');
}

// Per-VU memory of recent payments: {key, body, tenant, response body}.
const recent = [];
let seq = 0;

function tenantOf(vu) {
  return `Bearer tenant-${vu % TENANTS}`;
}

function params(key, tenant, name, expected) {
  const headers = Object.assign({ Authorization: tenant }, JSON_HEADERS);
  if (key) headers['Idempotency-Key'] = key;
  return {
    headers,
    tags: Object.assign({ name }, API),
    responseCallback: http.expectedStatuses(...expected),
  };
}

function newPayment(data) {
  const vu = exec.vu.idInTest;
  const tenant = tenantOf(vu);
  const key = `${data.prefix}-t${vu % TENANTS}-${vu}-${seq++}`;
  const body = JSON.stringify({ amount: 1 + Math.floor(Math.random() * 10000), currency: 'eur' });
  return { key, body, tenant };
}

function remember(p, res) {
  recent.push(Object.assign({ response: res.body }, p));
  if (recent.length > RECENT) recent.shift();
}

export default function (data) {
  const url = `${BASE_URL}/v1/payments`;
  const roll = Math.random() * 100;

  if (roll < 10 && recent.length > 0) {
    // Retry of a completed payment: the stored response, replayed byte for byte.
    const p = recent[Math.floor(Math.random() * recent.length)];
    const res = http.post(url, p.body, params(p.key, p.tenant, 'POST /v1/payments (retry)', [201]));
    outcomes.add(1, { outcome: 'replay' });
    expectResponse(
      res,
      isPayment(res, p.key) && replayed(res) === 'true' && res.body === p.response,
      'retry replays the stored 201',
    );
  } else if (roll < 15 && recent.length > 0) {
    // Same key, different body: the key was used for another request.
    const p = recent[Math.floor(Math.random() * recent.length)];
    const body = JSON.stringify({ amount: JSON.parse(p.body).amount + 1, currency: 'eur' });
    const res = http.post(url, body, params(p.key, p.tenant, 'POST /v1/payments (conflicting body)', [422]));
    outcomes.add(1, { outcome: 'conflict_422' });
    expectResponse(res, isProblem(res, 422, 'idempotency_key_reused'), '422 idempotency_key_reused');
  } else if (roll < 20) {
    // Double submit: the same new request twice at once.
    const p = newPayment(data);
    const prm = params(p.key, p.tenant, 'POST /v1/payments (double submit)', [201, 409]);
    const [a, b] = http.batch([
      ['POST', url, p.body, prm],
      ['POST', url, p.body, prm],
    ]);
    outcomes.add(1, { outcome: 'double_submit' });
    const firsts = [a, b].filter((r) => isPayment(r, p.key) && replayed(r) === 'false').length;
    const others = [a, b].filter(
      (r) => (isPayment(r, p.key) && replayed(r) === 'true') || isProblem(r, 409, 'idempotency_key_in_flight'),
    ).length;
    // Report each response once: both fine when exactly one ran first and the other was held back.
    const ok = firsts === 1 && others === 1;
    expectResponse(a, ok, 'double submit: one first execution, one 409 or replay');
    expectResponse(b, ok, 'double submit: one first execution, one 409 or replay');
    const first = [a, b].find((r) => replayed(r) === 'false');
    if (first) remember(p, first);
  } else if (roll < 30) {
    // A read: no key, proxied untouched.
    const res = http.get(url, params(null, tenantOf(exec.vu.idInTest), 'GET /v1/payments', [200]));
    outcomes.add(1, { outcome: 'read' });
    expectResponse(res, res.status === 200 && replayed(res) === undefined, 'GET proxied');
  } else {
    const p = newPayment(data);
    const res = http.post(url, p.body, params(p.key, p.tenant, 'POST /v1/payments (new key)', [201]));
    outcomes.add(1, { outcome: 'new' });
    const ok = expectResponse(res, isPayment(res, p.key) && replayed(res) === 'false', '201 first execution');
    if (ok) remember(p, res);
  }
}

export function teardown() {
  checkExecutions('mixed');
}
