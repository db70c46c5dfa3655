//! The lifecycle matrix: each kind of keyed request in flight on one replica (a
//! buffered slow call, a live stream, a call detached after its client's 504, a waiter,
//! a joiner, the completer's attempt at an abandoned request) meets each lifecycle
//! event (SIGTERM, SIGKILL, SIGSTOP past the lease, an admin invalidation, a forced one,
//! a `ttl` shorter than the call, Redis restarted empty), on a fleet of real processes in the
//! default durable configuration (Redis run as vouched claims rely on, Postgres with
//! vouched claims, three replicas behind HAProxy, `on_ambiguous = "store"`), or with
//! `LIFECYCLE_CLAIMS=write_through` in the configuration before 0.6.0 (write-through
//! claims; its cells' names say so).
//!
//! A cell puts [`KEYS`] keys in flight, applies its event two seconds in, and has a
//! retrier per key sending the key through HAProxy from then on, as clients retry after
//! a cut, until one gets a replay. It is judged on executions per key (the demo
//! upstream's ledger) and on every client's answers ([`answers::judge`]): each whole
//! answer any client got (the first client, a holder, a waiter, a joiner, a retrier)
//! must be the key's stored one byte for byte, and every key must end stored.
//!
//! A key may run twice only where the documented window allows it, and the cell then
//! says MEASURED: the key was freed on purpose (a forced invalidation), or the completer's
//! attempt froze past its lease (SIGSTOP) on a route with the completer, whose upstream
//! deduplicates on the forwarded key, so a retry that takes the lapsed lease over runs it
//! again. Every other cell must PASS: a lease that lapsed under a crashed or frozen holder
//! is an unknown outcome, stored and replayed, never run again.

mod rows;

use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::answers::{self, retrier, send, Answer, Call, TENANT};
use crate::checker::Report;
use crate::cluster::{Durability, Options, Probe, Stack};

/// Keys per cell.
const KEYS: usize = 3;
const LOCK_TTL: Duration = Duration::from_secs(3);
/// The upstream's work: longer than the lease, the grace and a short `ttl`.
const WORK_MS: u64 = 6000;
/// When the event comes, after the requests were sent.
const EVENT_AT: Duration = Duration::from_secs(2);
const ADMIN_TOKEN: &str = "chaos-admin-token-0123456789";

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
    /// The completer's attempt at a request abandoned on a replica that was killed
    /// (its client never retried), running on the victim.
    Completer,
}

/// What happens to the victim replica (or the fleet).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Sigterm,
    Sigkill,
    /// Frozen for the lease and 1.5 s more, then thawed.
    Sigstop,
    /// `DELETE /admin/keys/...` of every key (refused while a lease holds it).
    Invalidate,
    /// `DELETE /admin/keys/...?force=true` of every key.
    ForcedInvalidate,
    /// No event: the route's `ttl` is the lease (3 s), shorter than the call.
    Expiry,
    RedisRestart,
}

impl Kind {
    /// Whether the victim runs the upstream call itself (else it holds a duplicate).
    fn runs_the_call(self) -> bool {
        matches!(
            self,
            Kind::Buffered | Kind::Live | Kind::Detached | Kind::Completer
        )
    }

    /// What its clients send: the upstream works [`WORK_MS`]; it acts even when the
    /// gateway hangs up, but for the abandoned request (the completer's attempt is then
    /// its only execution).
    fn call(self) -> Call {
        match self {
            Kind::Live | Kind::Joiner => Call::Stream { work_ms: WORK_MS },
            Kind::Completer => Call::Payment {
                work_ms: WORK_MS,
                detach: false,
            },
            _ => Call::Payment {
                work_ms: WORK_MS,
                detach: true,
            },
        }
    }
}

/// The claim mode of the matrix and of the rolling restart: the default (vouched
/// claims), or write-through claims with `LIFECYCLE_CLAIMS=write_through`.
pub fn durability() -> Durability {
    match std::env::var("LIFECYCLE_CLAIMS").as_deref() {
        Ok("write_through") => Durability::WriteThrough,
        Ok("vouched") | Err(_) => Durability::Vouched,
        Ok(other) => panic!("LIFECYCLE_CLAIMS: \"vouched\" or \"write_through\", not {other:?}"),
    }
}

/// A cell's name: its kind and event, and the claim mode when it is not the default.
pub fn cell_name(kind: Kind, event: Event) -> String {
    named(format!("lifecycle: {kind:?} x {event:?}"))
}

/// `name`, with the claim mode when it is not the default.
pub fn named(name: String) -> String {
    match durability() {
        Durability::WriteThrough => format!("{name} [claims=write_through]"),
        _ => name,
    }
}

/// The fleet of a cell.
fn options(kind: Kind, event: Event) -> Options {
    let waits = matches!(kind, Kind::Waiter | Kind::Joiner);
    let ttl = match event {
        Event::Expiry => "[routes.idempotency]\nttl = \"3s\"\n",
        _ => "",
    };
    let completer = kind == Kind::Completer;
    Options {
        durability: durability(),
        lock_ttl: "3s".into(),
        shutdown_grace: "4s".into(),
        command_timeout: "500ms".into(),
        upstream_timeout: if kind == Kind::Detached { "1s" } else { "30s" }.into(),
        idempotency: match (waits, completer) {
            (true, _) => "in_flight = \"wait\"\nwait_timeout = \"30s\"\n".into(),
            (_, true) => "completer = true\n".into(),
            _ => String::new(),
        },
        postgres: match completer {
            true => "completer_interval = \"1s\"\ncompleter_grace = \"500ms\"\n".into(),
            false => String::new(),
        },
        extra: format!("{ttl}[admin]\ntoken = \"{ADMIN_TOKEN}\"\n"),
        ..Options::default()
    }
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
    let mut started = Instant::now();
    let mut notes = Vec::new();
    // Each key's clients other than its retrier, in the order they were sent.
    let mut clients: Vec<Vec<JoinHandle<Answer>>> = Vec::new();
    if kind == Kind::Completer {
        started = abandon(&mut stack, &http, &keys, &mut notes).await;
        clients = keys.iter().map(|_| Vec::new()).collect();
    }
    for key in keys.iter().filter(|_| kind != Kind::Completer) {
        let holder = match kind.runs_the_call() {
            true => victim.clone(),
            false => other.clone(),
        };
        let (h, k) = (http.clone(), key.clone());
        let first = async move { send(&h, &holder, &k, kind.call()).await };
        let mut sent = vec![tokio::spawn(first)];
        if !kind.runs_the_call() {
            // The duplicate on the victim, once the holder runs (a joiner: once its
            // answer streams).
            let (h, k, victim) = (http.clone(), key.clone(), victim.clone());
            sent.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(800)).await;
                send(&h, &victim, &k, kind.call()).await
            }));
        }
        clients.push(sent);
    }
    tokio::time::sleep_until((started + EVENT_AT).into()).await;
    let retriers: Vec<JoinHandle<Vec<Answer>>> = (keys.iter())
        .map(|key| {
            let (http, front, key) = (http.clone(), stack.front(), key.clone());
            tokio::spawn(retrier(http, front, key, kind.call()))
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
    let window = match (kind, event) {
        (Kind::Completer, Event::Sigkill | Event::Sigstop) => Some(
            "the completer's window: its upstream deduplicates on the key, so a retry runs a lapsed lease's key again",
        ),
        (_, Event::ForcedInvalidate) => Some("by intent: a forced invalidation frees a running key"),
        _ => None,
    };
    answers::judge(&mut report, window, &keys, &answers, &ledger.keys);
    report.notes.extend(notes);
    if report.verdict() == "FAIL" {
        stack.keep_logs_of(&mut report, &name);
    }
    report
}

/// Applies the event (on the victim, replica 1).
async fn apply(stack: &mut Stack, event: Event, keys: &[String], notes: &mut Vec<String>) {
    match event {
        Event::Sigterm => {
            let exited = stop(stack, 1).await;
            notes.push(format!(
                "victim exited {} ms after SIGTERM (grace 4 s)",
                exited.as_millis()
            ));
        }
        Event::Sigkill => stack.replicas[1].kill(),
        Event::Sigstop => {
            stack.replicas[1].signal("STOP");
            tokio::time::sleep(LOCK_TTL + Duration::from_millis(1500)).await;
            stack.replicas[1].signal("CONT");
        }
        Event::Invalidate | Event::ForcedInvalidate => {
            let admin = stack.replicas[0].admin_url();
            let (query, said) = match event {
                Event::ForcedInvalidate => ("?force=true", "forced DELETE"),
                _ => ("", "DELETE"),
            };
            for key in keys {
                let deleted = (stack.http)
                    .delete(format!("{admin}/admin/keys/payments/{key}{query}"))
                    .bearer_auth(ADMIN_TOKEN)
                    .header("Idemgate-Scope-Authorization", TENANT)
                    .send()
                    .await;
                let status = deleted.map(|r| r.status().as_u16()).unwrap_or(0);
                notes.push(format!("{said}: {status}"));
            }
        }
        Event::Expiry => {}
        Event::RedisRestart => stack.redis.restart_empty(),
    }
}

/// The completer's kind: each key is sent once to replica 0 by a client that never
/// retries, replica 0 is killed before the upstream acts and replica 2 stopped, so that
/// the victim's completer takes every abandoned key over once its lease ran out and
/// sends it again; replicas 0 and 2 are then started again. Returns a moment
/// [`EVENT_AT`] before the event is due: a second after the attempts were seen running.
async fn abandon(
    stack: &mut Stack,
    http: &reqwest::Client,
    keys: &[String],
    notes: &mut Vec<String>,
) -> Instant {
    let abandoner = stack.replicas[0].url();
    for key in keys {
        let (h, base, key) = (http.clone(), abandoner.clone(), key.clone());
        tokio::spawn(async move { send(&h, &base, &key, Kind::Completer.call()).await });
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    stack.replicas[0].kill();
    let abandoned = Instant::now();
    stop(stack, 2).await;
    let mut taken = 0.0;
    while taken < keys.len() as f64 && abandoned.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        taken = (stack.replicas[1])
            .metric(&stack.http, "idemgate_completer_takeovers_total")
            .await
            .unwrap_or(0.0);
    }
    notes.push(format!(
        "the victim's completer took {taken} abandoned keys over {} ms after the abandoner died",
        abandoned.elapsed().as_millis()
    ));
    for i in [0, 2] {
        stack.replicas[i].start();
    }
    for i in [0, 2] {
        let http = stack.http.clone();
        stack.replicas[i]
            .wait_ready(&http, Duration::from_secs(20))
            .await;
    }
    Instant::now() + Duration::from_secs(1) - EVENT_AT
}

/// SIGTERMs replica `i` and waits until it exited (at most 10 s): how long it took.
pub async fn stop(stack: &mut Stack, i: usize) -> Duration {
    let termed = Instant::now();
    stack.replicas[i].signal("TERM");
    while stack.replicas[i].running() && termed.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    termed.elapsed()
}
