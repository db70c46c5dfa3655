//! The driver's workload: keys started by concurrent workers for a bounded time, each
//! sent by its tenants' clients (three at once for a duplicated key) with retries.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{retryable, Got, KeyClass, Phase, Plan, Recorder, Req};

/// Maps a key number to its URL query and what the upstream will do with it.
pub type Shape = Arc<dyn Fn(u64) -> (String, KeyClass) + Send + Sync>;

pub struct Workload {
    pub scenario: String,
    /// New keys are started for this long.
    pub duration: Duration,
    /// Keys in progress at once.
    pub workers: usize,
    pub tenants: usize,
    /// Base URLs; attempts go round robin over them (usually just HAProxy).
    pub targets: Vec<String>,
    pub attempt_timeout: Duration,
    /// Probability and timeout of an attempt whose client gives up mid-request.
    pub disconnect: Option<(f64, Duration)>,
    /// A key's senders stop retrying this long after its first attempt.
    pub key_deadline: Duration,
    pub max_attempts: usize,
    /// Hard cap on requests sent by the run.
    pub max_requests: usize,
    /// Share of keys used by two tenants at once.
    pub shared_ratio: f64,
    /// Share of keys sent by three concurrent clients of the same tenant.
    pub dup_ratio: f64,
    /// Wait what `Retry-After` says before a retry, at most this long (`None`: a random
    /// 50-200 ms, whatever the answer says).
    pub retry_after_cap: Option<Duration>,
    pub shape: Shape,
}

impl Workload {
    pub fn new(scenario: &str, targets: Vec<String>) -> Self {
        Self {
            scenario: scenario.replace(['[', ']', '=', ' '], "_"),
            duration: Duration::from_secs(8),
            workers: 24,
            tenants: 3,
            targets,
            attempt_timeout: Duration::from_secs(3),
            disconnect: None,
            key_deadline: Duration::from_secs(12),
            max_attempts: 40,
            max_requests: 20_000,
            shared_ratio: 0.1,
            dup_ratio: 0.3,
            retry_after_cap: None,
            shape: Arc::new(|n| (format!("?latency_ms={}", 20 + n % 5 * 40), KeyClass::Normal)),
        }
    }
}

/// Runs the workload to completion; returns every key it used.
pub async fn run(w: Arc<Workload>, rec: Arc<Recorder>, http: reqwest::Client) -> Vec<Plan> {
    let plans = Arc::new(Mutex::new(Vec::new()));
    let next_key = Arc::new(AtomicU64::new(0));
    let turn = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..w.workers {
        let (w, rec, http, plans, next_key, turn) = (
            w.clone(),
            rec.clone(),
            http.clone(),
            plans.clone(),
            next_key.clone(),
            turn.clone(),
        );
        workers.push(tokio::spawn(async move {
            while started.elapsed() < w.duration && rec.requests() < w.max_requests {
                let n = next_key.fetch_add(1, Ordering::Relaxed);
                let plan = plan(&w, n);
                plans.lock().unwrap().push(plan.clone());
                let dup = fraction(n, 7) < w.dup_ratio;
                let mut senders = Vec::new();
                for req in &plan.reqs {
                    for _ in 0..if dup { 3 } else { 1 } {
                        senders.push(tokio::spawn(sender(
                            w.clone(),
                            rec.clone(),
                            http.clone(),
                            req.clone(),
                            turn.clone(),
                        )));
                    }
                }
                for s in senders {
                    let _ = s.await;
                }
            }
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }
    let plans = plans.lock().unwrap().clone();
    plans
}

/// A deterministic number in [0, 1) for key `n` (salted), so runs are comparable.
fn fraction(n: u64, salt: u64) -> f64 {
    let mut x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 31;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 29;
    (x % 1_000_000) as f64 / 1_000_000.0
}

fn plan(w: &Workload, n: u64) -> Plan {
    let (query, class) = (w.shape)(n);
    let shared = fraction(n, 3) < w.shared_ratio;
    let first = (n as usize) % w.tenants;
    let (key, tenants) = if shared {
        (
            format!("{}-{n}-shared", w.scenario),
            vec![first, (first + 1) % w.tenants],
        )
    } else {
        (format!("{}-{n}-t{first}", w.scenario), vec![first])
    };
    let reqs = tenants
        .into_iter()
        .map(|tenant| {
            Arc::new(Req {
                tenant,
                key: key.clone(),
                path: format!("/v1/payments{query}"),
                body: format!("{{\"amount\":{},\"currency\":\"eur\"}}", 100 + n),
            })
        })
        .collect();
    Plan { key, class, reqs }
}

async fn sender(
    w: Arc<Workload>,
    rec: Arc<Recorder>,
    http: reqwest::Client,
    req: Arc<Req>,
    turn: Arc<AtomicUsize>,
) {
    let first = Instant::now();
    for _ in 0..w.max_attempts {
        let target = &w.targets[turn.fetch_add(1, Ordering::Relaxed) % w.targets.len()];
        let timeout = match w.disconnect {
            Some((p, short)) if rand::random::<f64>() < p => short,
            _ => w.attempt_timeout,
        };
        let got = rec.send(&http, target, &req, timeout, Phase::Load).await;
        if !retryable(&got) || first.elapsed() > w.key_deadline || rec.requests() >= w.max_requests
        {
            return;
        }
        tokio::time::sleep(backoff(&w, &got)).await;
    }
}

/// How long a sender waits before its next attempt: `Retry-After` (capped) when the
/// workload honours it and the answer has one, else a random 50-200 ms.
fn backoff(w: &Workload, got: &Got) -> Duration {
    let told = match (w.retry_after_cap, got) {
        (Some(cap), Got::Resp(r)) => r.retry_after().map(|d| d.min(cap)),
        _ => None,
    };
    told.unwrap_or_else(|| Duration::from_millis(50 + rand::random::<u64>() % 150))
}
