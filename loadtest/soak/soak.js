// k6 script of `make soak` (loadtest/soak/soak.py): a fixed arrival rate (open model:
// k6 starts RATE requests per second whatever the answers' latency) of mixed requests,
// POST /v1/payments with the same body, through HAProxy to the two replicas.
// Iteration i is a first execution (a fresh key, PREFIX-i) when i % 100 < FIRST_PCT,
// else a replay of a key stored earlier in the run: one of the first executions between
// REPLAY_MIN_S and REPLAY_MAX_S seconds back (inside the records' ttl); the first
// seconds of the run, with nothing that old yet, send first executions instead.
// Every answer is checked and counted: a first execution must be 201 without the
// replay marker (`Idempotent-Replayed`), a replay 201 with `Idempotent-Replayed: true`.
//
// Environment: TARGET, RATE, DURATION ("30m"), PREFIX, FIRST_PCT (70),
//   REPLAY_MIN_S (5), REPLAY_MAX_S (120), OUT (the counters as JSON, via handleSummary).
import http from 'k6/http';
import exec from 'k6/execution';
import { Counter } from 'k6/metrics';

const TARGET = __ENV.TARGET;
const RATE = parseInt(__ENV.RATE || '300', 10);
const PREFIX = __ENV.PREFIX || 'soak';
const FIRST_PCT = parseInt(__ENV.FIRST_PCT || '70', 10);
const MIN_BACK = RATE * parseFloat(__ENV.REPLAY_MIN_S || '5');
const MAX_BACK = RATE * parseFloat(__ENV.REPLAY_MAX_S || '120');
const BODY = '{"amount":100,"currency":"eur"}';

const firsts = new Counter('soak_firsts');
const firstsOk = new Counter('soak_firsts_ok');
const firstsMarked = new Counter('soak_firsts_marked');
const replays = new Counter('soak_replays');
const replaysOk = new Counter('soak_replays_ok');
const replaysUnmarked = new Counter('soak_replays_unmarked');
const status5xx = new Counter('soak_status_5xx');
const statusOther = new Counter('soak_status_other');
const noAnswer = new Counter('soak_no_answer');

http.setResponseCallback(http.expectedStatuses(201));

export const options = {
  discardResponseBodies: true,
  systemTags: ['status'],
  summaryTrendStats: ['min', 'med', 'avg', 'p(90)', 'p(99)', 'p(99.9)', 'max'],
  scenarios: {
    soak: {
      executor: 'constant-arrival-rate',
      rate: RATE,
      timeUnit: '1s',
      duration: __ENV.DURATION || '30m',
      preAllocatedVUs: 150,
      maxVUs: 600,
    },
  },
};

function isFirst(i) {
  return i % 100 < FIRST_PCT;
}

// A first execution at least MIN_BACK and at most MAX_BACK iterations before i, or -1.
function earlierFirst(i) {
  let j = i - MIN_BACK - Math.floor(Math.random() * (MAX_BACK - MIN_BACK));
  while (j >= 0 && !isFirst(j)) j -= 1;
  return j;
}

export default function () {
  const i = exec.scenario.iterationInTest;
  const j = isFirst(i) ? -1 : earlierFirst(i);
  const replay = j >= 0;
  const res = http.post(`${TARGET}/v1/payments`, BODY, {
    headers: {
      'Content-Type': 'application/json',
      'Idempotency-Key': `${PREFIX}-${replay ? j : i}`,
      Authorization: 'Bearer soak-tenant',
    },
    timeout: '10s',
  });
  const marked = res.headers['Idempotent-Replayed'] === 'true';
  if (res.status === 0) noAnswer.add(1);
  else if (res.status >= 500) status5xx.add(1);
  else if (res.status !== 201) statusOther.add(1);
  if (replay) {
    replays.add(1);
    if (res.status === 201 && marked) replaysOk.add(1);
    if (res.status === 201 && !marked) replaysUnmarked.add(1);
  } else {
    firsts.add(1);
    if (res.status === 201 && !marked) firstsOk.add(1);
    if (marked) firstsMarked.add(1);
  }
}

export function handleSummary(data) {
  const count = (name) => (data.metrics[name] ? data.metrics[name].values.count : 0);
  const d = data.metrics.http_req_duration.values;
  const out = {
    requests: count('http_reqs'),
    dropped_iterations: count('dropped_iterations'),
    firsts: count('soak_firsts'),
    firsts_ok: count('soak_firsts_ok'),
    firsts_marked: count('soak_firsts_marked'),
    replays: count('soak_replays'),
    replays_ok: count('soak_replays_ok'),
    replays_unmarked: count('soak_replays_unmarked'),
    status_5xx: count('soak_status_5xx'),
    status_other: count('soak_status_other'),
    no_answer: count('soak_no_answer'),
    p50_ms: d.med,
    p99_ms: d['p(99)'],
    max_ms: d.max,
  };
  const files = { stdout: `${JSON.stringify(out)}\n` };
  if (__ENV.OUT) files[__ENV.OUT] = JSON.stringify(out, null, 2);
  return files;
}
