//! The lifecycle matrix: each kind of keyed request in flight on one replica (a
//! buffered slow call, a live stream, a call detached after its client's 504, a waiter,
//! a joiner) meets each lifecycle event (SIGTERM, SIGKILL, SIGSTOP past the lease, a
//! forced admin invalidation, a `ttl` shorter than the call, Redis restarted empty), on
//! a fleet of real processes in the default durable configuration (Redis, Postgres with
//! write-through claims, three replicas behind HAProxy, `on_ambiguous = "store"`).
//!
//! A cell puts [`KEYS`] keys in flight, applies its event two seconds in, and has a
//! retrier per key sending the key through HAProxy from then on, as clients retry after
//! a cut, until one gets a replay. It is judged on executions per key (the demo
//! upstream's ledger) and on every client's answers: each whole answer any client got
//! (the first client, a holder, a waiter, a joiner, a retrier) must be the key's stored
//! one byte for byte, and every key must end stored. A cut (a broken stream, a dropped
//! connection) or a "retry" answer (409, 503, a 504 timeout) is never wrong.
//!
//! A key may run twice only where the documented window allows it, and the cell then
//! says MEASURED: the replica running the call crashes (SIGKILL) or freezes past its
//! lease (SIGSTOP), so a retry runs the key again once the lease is gone; or the key was
//! freed on purpose (a forced invalidation). Every other cell must PASS.

use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::task::JoinHandle;

use crate::checker::Report;
use crate::cluster::{Durability, Options, Stack};

/// Keys per cell.
const KEYS: usize = 3;
const LOCK_TTL: Duration = Duration::from_secs(3);
/// The upstream's work: longer than the lease, the grace and a short `ttl`.
const WORK_MS: u64 = 6000;
/// When the event comes, after the requests were sent.
const EVENT_AT: Duration = Duration::from_secs(2);
/// A retrier gives up this long after the event.
const RETRY_BOUND: Duration = Duration::from_secs(40);
const ADMIN_TOKEN: &str = "chaos-admin-token-0123456789";
const TENANT: &str = "Bearer tenant-lifecycle";

/// What is in flight on the victim replica when the event comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A keyed call whose answer is buffered, the upstream working [`WORK_MS`].
    Buffered,
    /// A keyed answer streaming live (Server-Sent Events for [`WORK_MS`]).
    Live,
    /// A call whose client got 504 at `upstream_timeout` (1 s) and which goes on.
    Detached,
    /// A duplicate waiting (`in_flight = "wait"`) for a buffered call on another replica.
    Waiter,
    /// A duplicate joined to a live answer running on another replica.
    Joiner,
}

/// What happens to the victim replica (or the fleet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Sigterm,
    Sigkill,
    /// Frozen for the lease and 1.5 s more, then thawed.
    Sigstop,
    /// `DELETE /admin/keys/...?force=true` of every key.
    Invalidate,
    /// No event: the route's `ttl` is the lease (3 s), shorter than the call.
    Expiry,
    RedisRestart,
}

impl Kind {
    /// Whether the victim runs the upstream call itself (else it holds a duplicate).
    fn runs_the_call(self) -> bool {
        matches!(self, Kind::Buffered | Kind::Live | Kind::Detached)
    }

    fn live(self) -> bool {
        matches!(self, Kind::Live | Kind::Joiner)
    }
}

/// The fleet of a cell.
fn options(kind: Kind, event: Event) -> Options {
    let waits = matches!(kind, Kind::Waiter | Kind::Joiner);
    let ttl = match event {
        Event::Expiry => "[routes.idempotency]\nttl = \"3s\"\n",
        _ => "",
    };
    Options {
        durability: Durability::WriteThrough,
        lock_ttl: "3s".into(),
        shutdown_grace: "4s".into(),
        command_timeout: "500ms".into(),
        upstream_timeout: if kind == Kind::Detached { "1s" } else { "30s" }.into(),
        idempotency: match waits {
            true => "in_flight = \"wait\"\nwait_timeout = \"30s\"\n".into(),
            false => String::new(),
        },
        extra: format!("{ttl}[admin]\ntoken = \"{ADMIN_TOKEN}\"\n"),
        ..Options::default()
    }
}

/// One client's answer.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A whole answer the key may store: a 2xx, or a stored problem.
    Whole {
        status: u16,
        replayed: bool,
        body: Bytes,
    },
    /// Told to retry, or cut: never wrong.
    Retry(String),
}

/// Sends the key's request to `base`: the upstream works `work_ms` (the live kinds: a
/// streaming completion of a token every 100 ms).
pub async fn send(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    kind: Kind,
    work_ms: u64,
) -> Answer {
    let (path, body) = match kind.live() {
        true => (
            "/v1/completions".to_string(),
            format!(
                r#"{{"stream":true,"max_tokens":{},"token_ms":100}}"#,
                work_ms / 100
            ),
        ),
        false => (
            format!("/v1/payments?latency_ms={work_ms}&detach=true"),
            r#"{"amount":1,"currency":"eur"}"#.to_string(),
        ),
    };
    let sent = http
        .post(format!("{base}{path}"))
        .header("Idempotency-Key", key)
        .header("Authorization", TENANT)
        .header("Content-Type", "application/json")
        .body(body)
        .timeout(Duration::from_secs(30))
        .send()
        .await;
    let response = match sent {
        Ok(r) => r,
        Err(e) => return Answer::Retry(format!("no answer: {e}")),
    };
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    let body = match response.bytes().await {
        Ok(body) => body,
        Err(e) => return Answer::Retry(format!("{status}, cut: {e}")),
    };
    let code = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("code")?.as_str().map(str::to_string));
    let stored_problem = matches!(
        code.as_deref(),
        Some("upstream_outcome_unknown" | "upstream_response_too_large")
    );
    match (200..300).contains(&status) || stored_problem {
        true => Answer::Whole {
            status,
            replayed,
            body,
        },
        false => Answer::Retry(format!("{status} {}", code.unwrap_or_default())),
    }
}

/// Retries the key through `front` until a replay, or [`RETRY_BOUND`]: every answer.
pub async fn retrier(
    http: reqwest::Client,
    front: String,
    key: String,
    kind: Kind,
    work_ms: u64,
) -> Vec<Answer> {
    let deadline = Instant::now() + RETRY_BOUND;
    let mut answers = Vec::new();
    while Instant::now() < deadline {
        let answer = send(&http, &front, &key, kind, work_ms).await;
        let replayed = matches!(answer, Answer::Whole { replayed: true, .. });
        answers.push(answer);
        if replayed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    answers
}

/// Runs one cell of the matrix.
pub async fn cell(name: String, kind: Kind, event: Event) -> Report {
    let mut stack = Stack::start(options(kind, event)).await;
    let http = reqwest::Client::new();
    let slug: String = (name.chars())
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let keys: Vec<String> = (0..KEYS).map(|i| format!("{slug}-{i}")).collect();
    let (victim, other) = (stack.replicas[1].url(), stack.replicas[2].url());
    let started = Instant::now();
    // Each key's clients other than its retrier, in the order they were sent.
    let mut clients: Vec<Vec<JoinHandle<Answer>>> = Vec::new();
    for key in &keys {
        let holder = match kind.runs_the_call() {
            true => victim.clone(),
            false => other.clone(),
        };
        let (h, k) = (http.clone(), key.clone());
        let first = async move { send(&h, &holder, &k, kind, WORK_MS).await };
        let mut sent = vec![tokio::spawn(first)];
        if !kind.runs_the_call() {
            // The duplicate on the victim, once the holder runs (a joiner: once its
            // answer streams).
            let (h, k, victim) = (http.clone(), key.clone(), victim.clone());
            sent.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(800)).await;
                send(&h, &victim, &k, kind, WORK_MS).await
            }));
        }
        clients.push(sent);
    }
    tokio::time::sleep_until((started + EVENT_AT).into()).await;
    let mut notes = Vec::new();
    let retriers: Vec<JoinHandle<Vec<Answer>>> = (keys.iter())
        .map(|key| {
            let (http, front, key) = (http.clone(), stack.front(), key.clone());
            tokio::spawn(retrier(http, front, key, kind, WORK_MS))
        })
        .collect();
    apply(&mut stack, event, &keys, &mut notes).await;

    let mut report = Report {
        scenario: name.clone(),
        ..Default::default()
    };
    let mut answers: Vec<Vec<Answer>> = Vec::new();
    for (sent, retrier) in clients.into_iter().zip(retriers) {
        let mut all = Vec::new();
        for client in sent {
            all.push(
                client
                    .await
                    .unwrap_or_else(|e| Answer::Retry(e.to_string())),
            );
        }
        all.extend(retrier.await.unwrap_or_default());
        answers.push(all);
    }
    report.requests = answers.iter().map(Vec::len).sum();
    // The upstream's work that outlived its caller (`detach=true`, a completion's
    // task) acts before the ledger is read.
    let acted = started + Duration::from_millis(WORK_MS + 1000);
    tokio::time::sleep_until(acted.into()).await;
    let ledger = stack.ledger().await;
    let window = (kind.runs_the_call() && matches!(event, Event::Sigkill | Event::Sigstop))
        .then_some("the window: a retry runs the key again once the lease of a crashed or frozen holder ran out")
        .or((event == Event::Invalidate).then_some("the window: a forced invalidation frees a running key"));
    judge(&mut report, window, &keys, &answers, &ledger.keys);
    report.notes.extend(notes);
    if event == Event::Sigstop {
        stack.replicas[1].signal("CONT");
    }
    if report.verdict() == "FAIL" {
        stack.keep_logs_of(&mut report, &name);
    }
    report
}

/// Applies the event (on the victim, replica 1).
async fn apply(stack: &mut Stack, event: Event, keys: &[String], notes: &mut Vec<String>) {
    match event {
        Event::Sigterm => {
            let termed = Instant::now();
            stack.replicas[1].signal("TERM");
            while stack.replicas[1].running() && termed.elapsed() < Duration::from_secs(10) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            notes.push(format!(
                "victim exited {} ms after SIGTERM (grace 4 s)",
                termed.elapsed().as_millis()
            ));
        }
        Event::Sigkill => stack.replicas[1].kill(),
        Event::Sigstop => {
            stack.replicas[1].signal("STOP");
            tokio::time::sleep(LOCK_TTL + Duration::from_millis(1500)).await;
            stack.replicas[1].signal("CONT");
        }
        Event::Invalidate => {
            let admin = stack.replicas[0].admin_url();
            for key in keys {
                let deleted = (stack.http)
                    .delete(format!("{admin}/admin/keys/payments/{key}?force=true"))
                    .bearer_auth(ADMIN_TOKEN)
                    .header("Idemgate-Scope-Authorization", TENANT)
                    .send()
                    .await;
                let status = deleted.map(|r| r.status().as_u16()).unwrap_or(0);
                notes.push(format!("forced DELETE: {status}"));
            }
        }
        Event::Expiry => {}
        Event::RedisRestart => stack.redis.restart_empty(),
    }
}

/// Executions per key (more than one is MEASURED within `window`, the documented
/// reason, else FAIL), and every whole answer against the key's stored one.
pub fn judge(
    report: &mut Report,
    window: Option<&str>,
    keys: &[String],
    answers: &[Vec<Answer>],
    ledger: &std::collections::HashMap<String, u64>,
) {
    let (mut cuts, mut wholes) = (std::collections::BTreeMap::new(), 0);
    for (key, answers) in keys.iter().zip(answers) {
        let runs = ledger.get(key).copied().unwrap_or(0);
        report.executions += runs;
        if runs > 1 {
            report.duplicates += runs - 1;
            let why = format!("{key} ran {runs} times");
            match window {
                Some(_) => report.measured.push(why),
                None => report.fail(why),
            }
        }
        // The stored answer: the last replay a retrier got.
        let stored = answers.iter().rev().find_map(|a| match a {
            Answer::Whole {
                status,
                replayed: true,
                body,
            } => Some((*status, body.clone())),
            _ => None,
        });
        let Some((status, body)) = stored else {
            report.lost += 1;
            report.fail(format!(
                "{key}: no replay within {RETRY_BOUND:?}: {answers:?}"
            ));
            continue;
        };
        for answer in answers {
            match answer {
                Answer::Retry(why) => {
                    let why = why.split(':').next().unwrap_or_default().to_string();
                    *cuts.entry(why).or_insert(0) += 1;
                }
                Answer::Whole { status: s, body: b, .. } if (*s, b) == (status, &body) => wholes += 1,
                Answer::Whole { status: s, body: b, replayed } => report.fail(format!(
                    "{key}: a client got {s} (replayed {replayed}) {:?}, the key stores {status} {:?}",
                    String::from_utf8_lossy(&b[..b.len().min(120)]),
                    String::from_utf8_lossy(&body[..body.len().min(120)]),
                )),
            }
        }
    }
    report.notes.push(format!(
        "answers: {wholes} whole and the stored one; cut or told to retry: {cuts:?}"
    ));
    if let Some(window) = window.filter(|_| report.duplicates > 0) {
        report.notes.push(window.to_string());
    }
}
