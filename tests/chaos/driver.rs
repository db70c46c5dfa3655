//! The load driver: keyed JSON POSTs from several tenants (`Authorization` values),
//! concurrent duplicates of one key, keys shared by two tenants, and client retries on
//! timeouts, connection errors, 5xx and 409, for a bounded time and request count.
//! Every exchange is recorded: status, headers (minus `Date` and `X-Request-Id`;
//! `Idempotent-Replayed` kept apart), body.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::io::AsyncWriteExt;

/// One logical request: what a client sends, identically, on every attempt.
#[derive(Debug)]
pub struct Req {
    pub tenant: usize,
    pub key: String,
    /// Path and query (`/v1/payments?latency_ms=200`).
    pub path: String,
    pub body: String,
}

impl Req {
    pub fn authorization(&self) -> String {
        format!("Bearer tenant-{}", self.tenant)
    }
}

/// What the driver expects the upstream to do with a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyClass {
    /// Executes (once per tenant using the key).
    Normal,
    /// Never executes (`?status=503`: the upstream refuses without acting).
    NeverExecutes,
    /// Once per tenant, plus once more: its holder was frozen past its lease and
    /// another replica took the key over (by design; the fencing token is for this).
    Takeover,
    /// Once per tenant, but slower than the route's `upstream_timeout`: every attempt
    /// that reaches the upstream gets 504 before it answers, so a client learns the
    /// answer only from a replay, and that replay is its acknowledgment.
    Late,
}

/// A key and the requests that used it (one per tenant).
#[derive(Debug, Clone)]
pub struct Plan {
    pub key: String,
    pub class: KeyClass,
    pub reqs: Vec<Arc<Req>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resp {
    pub status: u16,
    /// `Idempotent-Replayed`, if present.
    pub replayed: Option<String>,
    /// Every header but `Date`, `X-Request-Id` and `Idempotent-Replayed`, in order.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Bytes,
}

impl Resp {
    pub fn is_replay(&self) -> bool {
        self.replayed.as_deref() == Some("true")
    }

    /// The `code` of a problem+json body, if it is one.
    pub fn problem_code(&self) -> Option<String> {
        let v: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        v.get("code")?.as_str().map(str::to_string)
    }

    /// The demo upstream's JSON body: (execution number, idempotency key).
    pub fn execution(&self) -> Option<(u64, String)> {
        let v: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        Some((
            v.get("execution")?.as_u64()?,
            v.get("idempotency_key")?.as_str()?.to_string(),
        ))
    }

    /// `Retry-After` in seconds, if present.
    pub fn retry_after(&self) -> Option<Duration> {
        let (_, v) = self.headers.iter().find(|(n, _)| n == "retry-after")?;
        let secs = std::str::from_utf8(v).ok()?.trim().parse().ok()?;
        Some(Duration::from_secs(secs))
    }

    /// Same status, headers and body: what a replay must reproduce.
    pub fn same_as(&self, other: &Resp) -> bool {
        self.status == other.status && self.headers == other.headers && self.body == other.body
    }
}

#[derive(Clone, Debug)]
pub enum Got {
    Resp(Resp),
    Timeout,
    /// The client's error (read through `Debug` in the evidence).
    Error(#[allow(dead_code)] String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// During the run, with the fault.
    Load,
    /// The final pass after the fault, through the front.
    Final,
    /// A second final pass after Redis was flushed: what Postgres kept.
    Durable,
}

#[derive(Clone, Debug)]
pub struct Exchange {
    pub req: Arc<Req>,
    pub phase: Phase,
    /// Milliseconds since the recorder started.
    pub sent_ms: u64,
    pub done_ms: u64,
    pub got: Got,
}

/// Every exchange of a scenario.
pub struct Recorder {
    pub start: Instant,
    pub exchanges: Mutex<Vec<Exchange>>,
    pub sent: AtomicUsize,
    /// Partial uploads (client gone mid-body): no response to record.
    pub partial: AtomicUsize,
}

impl Recorder {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            exchanges: Mutex::new(Vec::new()),
            sent: AtomicUsize::new(0),
            partial: AtomicUsize::new(0),
        })
    }

    fn ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    pub fn all(&self) -> Vec<Exchange> {
        self.exchanges.lock().unwrap().clone()
    }

    pub fn requests(&self) -> usize {
        self.sent.load(Ordering::Relaxed) + self.partial.load(Ordering::Relaxed)
    }

    /// Sends one attempt and records it.
    pub async fn send(
        &self,
        http: &reqwest::Client,
        base: &str,
        req: &Arc<Req>,
        timeout: Duration,
        phase: Phase,
    ) -> Got {
        self.sent.fetch_add(1, Ordering::Relaxed);
        let sent_ms = self.ms();
        let got = send(http, base, req, timeout).await;
        self.exchanges.lock().unwrap().push(Exchange {
            req: req.clone(),
            phase,
            sent_ms,
            done_ms: self.ms(),
            got: got.clone(),
        });
        got
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(512)
        .connect_timeout(Duration::from_secs(1))
        .tcp_nodelay(true)
        .build()
        .unwrap()
}

async fn send(http: &reqwest::Client, base: &str, req: &Req, timeout: Duration) -> Got {
    let response = http
        .post(format!("{base}{}", req.path))
        .header("Idempotency-Key", &req.key)
        .header("Authorization", req.authorization())
        .header("Content-Type", "application/json")
        .body(req.body.clone())
        .timeout(timeout)
        .send()
        .await;
    let response = match response {
        Ok(r) => r,
        Err(e) if e.is_timeout() => return Got::Timeout,
        Err(e) => return Got::Error(format!("{e:?}")),
    };
    let status = response.status().as_u16();
    let mut replayed = None;
    let mut headers = Vec::new();
    for (name, value) in response.headers() {
        match name.as_str() {
            "date" | "x-request-id" => {}
            "idempotent-replayed" => {
                replayed = Some(String::from_utf8_lossy(value.as_bytes()).into_owned())
            }
            n => headers.push((n.to_string(), value.as_bytes().to_vec())),
        }
    }
    match response.bytes().await {
        Ok(body) => Got::Resp(Resp {
            status,
            replayed,
            headers,
            body,
        }),
        Err(e) if e.is_timeout() => Got::Timeout,
        Err(e) => Got::Error(format!("body: {e:?}")),
    }
}

/// Whether a client retries after this answer.
pub fn retryable(got: &Got) -> bool {
    match got {
        Got::Timeout | Got::Error(_) => true,
        Got::Resp(r) if r.is_replay() => false,
        Got::Resp(r) => r.status == 409 || r.status >= 500,
    }
}

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

/// Re-sends each request until it gets a final answer (or `within` passes), recording
/// every attempt under `phase`. At most `concurrency` at a time.
pub async fn resend_all(
    rec: Arc<Recorder>,
    http: reqwest::Client,
    base: String,
    reqs: Vec<Arc<Req>>,
    phase: Phase,
    within: Duration,
    concurrency: usize,
) {
    let gate = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let deadline = Instant::now() + within;
    let mut tasks = Vec::new();
    for req in reqs {
        let (rec, http, base, gate) = (rec.clone(), http.clone(), base.clone(), gate.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire().await.unwrap();
            loop {
                let got = rec
                    .send(&http, &base, &req, Duration::from_secs(5), phase)
                    .await;
                if !retryable(&got) || Instant::now() > deadline {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// A client that sends the head and half the body of a keyed request, then hangs up.
pub async fn partial_upload(rec: &Recorder, addr: &str, req: &Req) {
    rec.partial.fetch_add(1, Ordering::Relaxed);
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return;
    };
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {addr}\r\nIdempotency-Key: {}\r\nAuthorization: {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        req.path,
        req.key,
        req.authorization(),
        req.body.len()
    );
    let _ = s.write_all(head.as_bytes()).await;
    let _ = s
        .write_all(&req.body.as_bytes()[..req.body.len() / 2])
        .await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    drop(s);
}
