// Shared helpers for the k6 scripts in this directory.
//
// Environment (all optional):
//   BASE_URL      the gateway (default http://127.0.0.1:8080, HAProxy of `make up`)
//   UPSTREAM_URL  the demo upstream's control endpoints (default http://127.0.0.1:3000)
//   DURATION      how long each script applies load (default 20s)
//   VUS           virtual users (each script has its own modest default)
//   ITERATIONS    most iterations (closed-model scripts; the run ends at DURATION
//                 or ITERATIONS, whichever comes first)
//   P99_MS        override a script's p99 latency threshold, in milliseconds
import http from 'k6/http';
import { check, fail } from 'k6';
import { Counter, Rate } from 'k6/metrics';

export const BASE_URL = (__ENV.BASE_URL || 'http://127.0.0.1:8080').replace(/\/+$/, '');
export const UPSTREAM_URL = (__ENV.UPSTREAM_URL || 'http://127.0.0.1:3000').replace(/\/+$/, '');
export const DURATION = __ENV.DURATION || '20s';

export function vus(dflt) {
  const n = parseInt(__ENV.VUS || `${dflt}`, 10);
  if (!(n > 0)) fail(`VUS must be a positive integer, got ${__ENV.VUS}`);
  return n;
}

export function iterations(dflt) {
  const n = parseInt(__ENV.ITERATIONS || `${dflt}`, 10);
  if (!(n > 0)) fail(`ITERATIONS must be a positive integer, got ${__ENV.ITERATIONS}`);
  return n;
}

export function p99ms(dflt) {
  const n = parseInt(__ENV.P99_MS || `${dflt}`, 10);
  if (!(n > 0)) fail(`P99_MS must be a positive integer, got ${__ENV.P99_MS}`);
  return n;
}

// Keys executed more than once by the upstream (set in teardown; must stay 0).
export const duplicateExecutions = new Counter('duplicate_executions');
// Responses whose status or shape was not one this scenario expects.
export const unexpected = new Rate('unexpected_responses');

// Every request to the gateway is tagged kind=api, so thresholds leave out the
// control calls to the demo upstream in setup() and teardown().
export const API = { kind: 'api' };

export const JSON_HEADERS = { 'Content-Type': 'application/json' };

// Options shared by every script: p99 in the summary, thresholds merged in.
export function options(extra) {
  return Object.assign(
    {
      summaryTrendStats: ['avg', 'min', 'med', 'p(90)', 'p(95)', 'p(99)', 'max', 'count'],
      setupTimeout: '10s',
      teardownTimeout: '10s',
      discardResponseBodies: false,
    },
    extra,
    {
      thresholds: Object.assign(
        {
          duplicate_executions: ['count==0'],
          unexpected_responses: ['rate<0.01'],
        },
        extra.thresholds || {},
      ),
    },
  );
}

function randomHex(n) {
  let s = '';
  for (let i = 0; i < n; i++) s += Math.floor(Math.random() * 16).toString(16);
  return s;
}

// setup(): clear the demo upstream's ledger and pick this run's key prefix.
// The prefix is random per run (stored responses outlive a run by 24h, in Redis
// and Postgres), and chosen here, once, rather than in the init context, which
// runs once per VU.
export function startRun(script) {
  const res = http.post(`${UPSTREAM_URL}/_demo/reset`, null, { tags: { name: 'demo_reset' } });
  if (res.status !== 200) {
    fail(`POST ${UPSTREAM_URL}/_demo/reset: status ${res.status} ${res.error || ''}: is the fleet up (make up)?`);
  }
  const probe = http.get(`${BASE_URL}/`, {
    tags: { name: 'gateway_probe' },
    timeout: '5s',
    responseCallback: http.expectedStatuses({ min: 200, max: 499 }),
  });
  if (probe.status === 0) {
    fail(`gateway ${BASE_URL} unreachable (${probe.error}): is the fleet up (make up)?`);
  }
  const prefix = `lt-${script}-${Date.now().toString(36)}-${randomHex(8)}`;
  console.log(`${script}: key prefix ${prefix}, base ${BASE_URL}`);
  return { prefix };
}

// teardown(): exactly-once check against the upstream's ledger.
export function checkExecutions(script) {
  const res = http.get(`${UPSTREAM_URL}/_demo/executions`, { tags: { name: 'demo_executions' } });
  if (res.status !== 200) {
    fail(`GET ${UPSTREAM_URL}/_demo/executions: status ${res.status} ${res.error || ''}`);
  }
  const body = res.json();
  const keys = body.keys || {};
  const dups = Object.entries(keys).filter(([, n]) => n > 1);
  const count = Math.max(dups.length, body.duplicates || 0);
  console.log(
    `${script}: upstream executed ${body.total} request(s) over ${Object.keys(keys).length} key(s); ` +
      `keys executed more than once: ${count}`,
  );
  duplicateExecutions.add(count);
  if (count > 0) {
    fail(
      `${script}: exactly-once violated: ${count} key(s) executed more than once, e.g. ` +
        JSON.stringify(dups.slice(0, 10)),
    );
  }
  return body;
}

export function header(res, name) {
  const want = name.toLowerCase();
  for (const k in res.headers) {
    if (k.toLowerCase() === want) return res.headers[k];
  }
  return undefined;
}

export function replayed(res) {
  return header(res, 'Idempotent-Replayed');
}

export function problemCode(res) {
  try {
    return res.json('code');
  } catch (e) {
    return undefined;
  }
}

// A 201 from the demo upstream, first execution or replay, for `key`, and the
// upstream ran it once (key_executions counts executions of the key so far).
export function isPayment(res, key) {
  if (res.status !== 201) return false;
  try {
    const b = res.json();
    return b.idempotency_key === key && b.key_executions === 1;
  } catch (e) {
    return false;
  }
}

// A gateway problem response with the given status and code.
export function isProblem(res, status, code) {
  return (
    res.status === status &&
    (header(res, 'Content-Type') || '').startsWith('application/problem+json') &&
    problemCode(res) === code
  );
}

// Record one response: `ok` says whether it is one the scenario expects; an
// unexpected one is logged with what came back (the first two of each VU).
let logged = 0;
export function expectResponse(res, ok, what) {
  check(res, { [what]: () => ok });
  unexpected.add(!ok);
  if (!ok && logged < 2) {
    logged++;
    console.warn(
      `unexpected response (${what}): status ${res.status} ${res.error || ''} ` +
        `replayed=${replayed(res)} body=${String(res.body).slice(0, 300)}`,
    );
  }
  return ok;
}
