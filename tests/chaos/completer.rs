//! The completer under chaos: replicas SIGKILLed under load while a share of
//! the clients never retry. Every key left abandoned must end completed (by the
//! completer) or given up (counted); the demo upstream, honouring the key
//! (`DEMO_DEDUPE=1`), records at most one effect per key, and every request it received
//! beyond the first for a key carries a higher fencing token than the one before.
//! A later retry of each abandoned key replays its stored response.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::checker::Report;
use crate::cluster::{Durability, Options, Stack};

/// New keys are started for this long.
const LOAD: Duration = Duration::from_secs(9);
const WORKERS: usize = 40;
/// Every how many keys one is sent by a client that never retries (2 in 5).
const ONE_SHOT: [usize; 2] = [1, 3];

/// How a key's client ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    /// A response the gateway stored (2xx).
    Answered(u16),
    /// A one-shot client that got no stored answer and went away.
    Abandoned(String),
    /// A retrying client that ran out of time.
    GaveUp,
}

struct Key {
    name: String,
    tenant: usize,
    path: String,
    end: End,
}

pub async fn sigkill_no_retry(name: String) -> Report {
    let opts = Options {
        durability: Durability::WriteThrough,
        idempotency: "completer = true".into(),
        postgres: "completer_interval = \"1s\"\ncompleter_grace = \"500ms\"\n\
                   completer_attempts = 3"
            .into(),
        upstream_env: vec![("DEMO_DEDUPE".into(), "1".into())],
        ..Options::default()
    };
    let mut stack = Stack::start(opts).await;
    let front = stack.front();
    let http = crate::driver::client();
    let keys: Arc<Mutex<Vec<Key>>> = Arc::default();
    let requests = Arc::new(AtomicUsize::new(0));
    let next = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..WORKERS {
        let (http, front, keys) = (http.clone(), front.clone(), keys.clone());
        let (requests, next) = (requests.clone(), next.clone());
        workers.spawn(async move {
            while t0.elapsed() < LOAD {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let key = Key {
                    name: format!("cmp-{n}"),
                    tenant: n % 3,
                    path: format!("/v1/payments?latency_ms={}", 400 + n % 4 * 200),
                    end: End::GaveUp,
                };
                let one_shot = ONE_SHOT.contains(&(n % 5));
                let end = drive(&http, &front, &key, one_shot, &requests).await;
                keys.lock().unwrap().push(Key { end, ..key });
            }
        });
    }
    // Replicas die under load, holding leases; each comes back 2 s later.
    for (at, victim) in [(2500, 1), (5000, 2), (7500, 0)] {
        tokio::time::sleep_until((t0 + Duration::from_millis(at)).into()).await;
        stack.replicas[victim].kill();
        tokio::time::sleep(Duration::from_secs(2)).await;
        stack.replicas[victim].start();
    }
    while workers.join_next().await.is_some() {}
    let keys = std::mem::take(&mut *keys.lock().unwrap());
    check(
        &name,
        &mut stack,
        &http,
        keys,
        requests.load(Ordering::Relaxed),
    )
    .await
}

/// Sends `key` until it gets a stored answer: once for a one-shot client, else retrying
/// (409 and failures) for up to 12 s.
async fn drive(
    http: &reqwest::Client,
    front: &str,
    key: &Key,
    one_shot: bool,
    requests: &AtomicUsize,
) -> End {
    let deadline = Instant::now() + Duration::from_secs(12);
    loop {
        requests.fetch_add(1, Ordering::Relaxed);
        let got = send(http, front, key).await;
        match got {
            Ok((status, _)) if (200..300).contains(&status) => return End::Answered(status),
            _ if one_shot => {
                return End::Abandoned(match got {
                    Ok((status, _)) => format!("status {status}"),
                    Err(e) => e,
                })
            }
            _ if Instant::now() > deadline => return End::GaveUp,
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

async fn send(http: &reqwest::Client, front: &str, key: &Key) -> Result<(u16, Vec<u8>), String> {
    let r = http
        .post(format!("{front}{}", key.path))
        .header("Idempotency-Key", &key.name)
        .header("Authorization", format!("Bearer tenant-{}", key.tenant))
        .header("Content-Type", "application/json")
        .body(format!("{{\"amount\":10,\"key\":\"{}\"}}", key.name))
        .timeout(Duration::from_secs(4))
        .send()
        .await
        .map_err(|e| format!("{e}"))?;
    let status = r.status().as_u16();
    let body = r.bytes().await.map_err(|e| format!("{e}"))?.to_vec();
    Ok((status, body))
}

async fn check(
    name: &str,
    stack: &mut Stack,
    http: &reqwest::Client,
    keys: Vec<Key>,
    requests: usize,
) -> Report {
    let mut report = Report {
        scenario: name.to_string(),
        requests,
        ..Default::default()
    };
    stack.wait_all_ready(Duration::from_secs(20)).await;
    stack.wait_front(Duration::from_secs(10)).await;
    let pg = stack.pg.as_ref().expect("write-through needs postgres");
    // lock_ttl (3 s) + grace + interval + the upstream's latency, with room for the
    // backoff of a second attempt: every lease left by a dead replica is settled.
    let settled = Instant::now();
    let mut left = pg.count("state = 'leased'").await;
    while left > 0 && settled.elapsed() < Duration::from_secs(25) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        left = pg.count("state = 'leased'").await;
    }
    if left > 0 {
        report.fail(format!(
            "{left} keys still leased (in doubt) 25 s after the load"
        ));
    }
    let by_completer = pg.count("completer = 'completed'").await;
    let given_up = pg.count("completer = 'given_up'").await;
    let kept = pg.count("request IS NOT NULL").await;
    if kept > 0 {
        report.fail(format!("{kept} records still keep their request"));
    }

    // At most one effect per key; fencing tokens grow with every request after the first.
    let ledger = stack.ledger().await;
    report.executions = ledger.total;
    for (key, n) in ledger.keys.iter().filter(|(_, n)| **n > 1) {
        report.duplicates += n - 1;
        report.fail(format!("{key}: {n} effects"));
    }
    let received = ledger.received;
    let mut resent = 0;
    for (key, fences) in &received {
        resent += fences.len() - 1;
        if fences.windows(2).any(|w| w[1] <= w[0]) {
            report.fail(format!("{key}: fencing tokens not increasing: {fences:?}"));
        }
    }

    // Every abandoned key that reached the upstream ends completed or given up, and a
    // later retry replays its response (twice, byte for byte), with no new effect.
    let abandoned: Vec<&Key> = keys
        .iter()
        .filter(|k| matches!(k.end, End::Abandoned(_)))
        .collect();
    let mut replayed = 0;
    for key in &abandoned {
        if !received.contains_key(&key.name) {
            continue; // never reached the upstream: nothing was in doubt
        }
        let a = send(http, &stack.front(), key).await;
        let b = send(http, &stack.front(), key).await;
        match (&a, &b) {
            (Ok((201, x)), Ok((201, y))) if x == y => replayed += 1,
            _ => report.fail(format!(
                "{}: retries after the completer got {a:?} / {b:?}",
                key.name
            )),
        }
    }
    let after = stack.ledger().await;
    if after.total != report.executions {
        report.fail("the retries of abandoned keys acted again");
    }
    let gave_up = keys.iter().filter(|k| k.end == End::GaveUp).count();
    if gave_up > 0 {
        report.fail(format!("{gave_up} retrying clients never got an answer"));
    }
    let metric = stack.metric_sum("idemgate_completer_takeovers_total").await;
    report.notes.push(format!(
        "{} keys, {} abandoned by one-shot clients ({} of them reached the upstream, all \
         replayed after); completer: \
         {by_completer} completed, {given_up} given up, {metric} takeovers on the replicas \
         alive at the end; {resent} re-sends received; {} stale refused",
        keys.len(),
        abandoned.len(),
        replayed,
        after.stale,
    ));
    stack.keep_logs_of(&mut report, name);
    report
}
