//! `demo-upstream`: a tiny fake "payments API" that sits behind idemgate for
//! `make up`, load tests and chaos tests.
//!
//! Every `POST`/`PUT`/`PATCH` under `/v1/` is a *side effect*: it is counted
//! per `Idempotency-Key` header value (`<none>` when absent) in an in-memory
//! ledger, so tests can ask `GET /_demo/executions` whether anything ran twice.
//!
//! Knobs (CLI flags, or `DEMO_*` environment variables):
//! * `--latency 250ms`   sleep before answering any `/v1/` request;
//! * `--fail-rate 0.1`   answer `--fail-status` (default 503) *without* executing;
//! * `--reset-rate 0.1`  execute, then drop the connection without an answer
//!   ("acted, then reset").
//!
//! Per-request query overrides on `/v1/` requests: `?latency_ms=200`,
//! `?status=503` (408, 429 and 5xx do not execute; any other status executes and
//! is used as the answer's status), `?reset=true` (execute, then drop) and
//! `?detach=true` (the call runs to its end, and executes, even when its caller hangs
//! up first, as a real service's work does; without it a call whose connection closes
//! during `latency_ms` is dropped before it executes).
//!
//! How the reset is done: the handler returns a response whose body stream
//! yields an error on its first poll. hyper then aborts the connection before
//! the response head is flushed, so the client sees the connection close with
//! no response at all (curl: "Empty reply from server"), while the side effect
//! has already been recorded.
//!
//! `--dedupe` (`DEMO_DEDUPE=1`): the upstream the completer needs (docs/completer.md)
//! treats `Idempotency-Key` as its own deduplication key: a key acts once, and a repeat
//! gets the first answer without acting again; a request whose
//! `Idempotency-Fencing-Token` is below one already seen for its key is refused (409).
//! `GET /_demo/executions` then also lists, per key, the fencing token of every request
//! received, in arrival order (`received`), and counts refusals (`stale`) and requests
//! marked `Idempotency-Completer` (`completer`).
//!
//! `POST /v1/completions` is a fake LLM completion API whose `"stream": true` answers
//! are Server-Sent Events, one token at a time (llm.rs); it is counted in the
//! same ledger.
//!
//! Control endpoints: `GET /_demo/health`, `GET /_demo/executions`,
//! `POST /_demo/reset`.
#![forbid(unsafe_code)]

mod effects;
mod llm;

use effects::Dedupe;

use std::collections::{BTreeMap, HashMap};
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::{Json, Router};
use clap::Parser;
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Debug, Parser)]
#[command(
    name = "demo-upstream",
    version,
    about = "Fake payments API for idemgate demos and tests"
)]
struct Args {
    /// Address to listen on.
    #[arg(long, env = "DEMO_LISTEN", default_value = "127.0.0.1:3000")]
    listen: SocketAddr,
    /// Delay before answering any /v1/ request (humantime, e.g. "150ms").
    #[arg(long, env = "DEMO_LATENCY", default_value = "0ms", value_parser = humantime::parse_duration)]
    latency: Duration,
    /// Probability (0..=1) that a side-effecting request fails without executing.
    #[arg(long, env = "DEMO_FAIL_RATE", default_value = "0.0", value_parser = parse_rate)]
    fail_rate: f64,
    /// Status code used for simulated failures.
    #[arg(long, env = "DEMO_FAIL_STATUS", default_value = "503", value_parser = parse_status)]
    fail_status: StatusCode,
    /// Probability (0..=1) that a request executes and then has its connection dropped.
    #[arg(long, env = "DEMO_RESET_RATE", default_value = "0.0", value_parser = parse_rate)]
    reset_rate: f64,
    /// Honour `Idempotency-Key` as the deduplication key (one effect per key).
    #[arg(long, env = "DEMO_DEDUPE", default_value = "false", value_parser = clap::builder::BoolishValueParser::new())]
    dedupe: bool,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        Ok(v) => Err(format!("{v} is not within 0.0..=1.0")),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_status(s: &str) -> Result<StatusCode, String> {
    let code: u16 = s.parse().map_err(|e| format!("{e}"))?;
    StatusCode::from_u16(code).map_err(|e| e.to_string())
}

struct AppState {
    args: Args,
    /// Idempotency-Key value -> number of executions.
    ledger: Mutex<HashMap<String, u64>>,
    /// Monotonic execution sequence; never reset, so `pay_<n>` ids stay unique.
    seq: AtomicU64,
    /// `--dedupe`: what each key was answered, and the requests received.
    dedupe: Mutex<Dedupe>,
}

impl AppState {
    fn ledger(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records one execution for `key`; returns (global sequence, per-key count).
    fn record(&self, key: &str) -> (u64, u64) {
        let mut ledger = self.ledger();
        let n = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let count = ledger.entry(key.to_owned()).or_insert(0);
        *count += 1;
        (n, *count)
    }
}

type Shared = Arc<AppState>;

#[derive(Debug, Default, Deserialize)]
struct Overrides {
    latency_ms: Option<u64>,
    status: Option<u16>,
    reset: Option<bool>,
    detach: Option<bool>,
}

/// Statuses a client would typically retry; with `?status=` they do not execute.
/// The request's `Idempotency-Key`, the ledger's key (`<none>` without one).
fn key_of(headers: &HeaderMap) -> String {
    headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("<none>")
        .to_owned()
}

fn is_transient(status: StatusCode) -> bool {
    status.is_server_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
}

/// Outcome of a request, attached to the response for the access log.
#[derive(Clone, Copy)]
struct Outcome(&'static str);

fn tagged(outcome: &'static str, resp: impl IntoResponse) -> Response {
    let mut resp = resp.into_response();
    resp.extensions_mut().insert(Outcome(outcome));
    resp
}

/// Access log: one line per request, never bodies.
async fn access_log(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let key = req
        .headers()
        .get("idempotency-key")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let resp = next.run(req).await;
    tracing::info!(
        %method,
        %path,
        idempotency_key = key.as_deref().unwrap_or("-"),
        status = resp.status().as_u16(),
        outcome = resp.extensions().get::<Outcome>().map_or("-", |o| o.0),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "request"
    );
    resp
}

/// Whether `method` has a side effect here (executes and is counted).
fn side_effecting(method: &Method) -> bool {
    matches!(*method, Method::POST | Method::PUT | Method::PATCH)
}

async fn v1(
    State(st): State<Shared>,
    method: Method,
    uri: Uri,
    Query(q): Query<Overrides>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if q.detach != Some(true) {
        return call(st, method, uri, q, headers, body).await;
    }
    // A task of its own: hyper dropping this handler (the caller hung up) leaves it running.
    let call = tokio::spawn(call(st, method, uri, q, headers, body));
    call.await.unwrap_or_else(|e| {
        let body = json!({"error": format!("detached call failed: {e}")});
        tagged("failed", (StatusCode::INTERNAL_SERVER_ERROR, Json(body)))
    })
}

/// One `/v1/` call: the latency, then a read, a refusal, a simulated failure or an
/// execution.
async fn call(
    st: Shared,
    method: Method,
    uri: Uri,
    q: Overrides,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = key_of(&headers);
    let latency = q.latency_ms.map_or(st.args.latency, Duration::from_millis);
    let fence: Option<i64> =
        (headers.get("idempotency-fencing-token")).and_then(|v| v.to_str().ok()?.parse().ok());
    if st.args.dedupe && side_effecting(&method) {
        st.received(&key, fence, headers.contains_key("idempotency-completer"));
    }
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }

    if method == Method::GET || method == Method::HEAD {
        let body = json!({"object": "list", "path": uri.path(), "data": []});
        return tagged("read", Json(body));
    }
    if !side_effecting(&method) {
        let body = json!({"error": "method not allowed"});
        return tagged("rejected", (StatusCode::METHOD_NOT_ALLOWED, Json(body)));
    }
    let forced = match q.status.map(StatusCode::from_u16) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(_)) => {
            let body = json!({"error": "invalid status override"});
            return tagged("rejected", (StatusCode::BAD_REQUEST, Json(body)));
        }
    };
    if let Some(failed) = st.simulated_failure(forced) {
        return failed;
    }
    if st.args.dedupe {
        return st.execute_once(key, fence, forced);
    }
    st.execute(key, &q, forced, &body)
}

async fn executions(State(st): State<Shared>) -> Json<Value> {
    let ledger = st.ledger();
    let total: u64 = ledger.values().sum();
    let duplicates = ledger.values().filter(|&&c| c > 1).count();
    let keys: BTreeMap<&String, &u64> = ledger.iter().collect();
    let mut out = json!({"total": total, "keys": keys, "duplicates": duplicates});
    if st.args.dedupe {
        let d = st.dedupe.lock().unwrap_or_else(PoisonError::into_inner);
        let received: BTreeMap<&String, &Vec<i64>> = d.received.iter().collect();
        out["received"] = json!(received);
        out["stale"] = json!(d.stale);
        out["completer"] = json!(d.completer);
    }
    Json(out)
}

async fn reset(State(st): State<Shared>) -> Json<Value> {
    let mut ledger = st.ledger();
    let cleared = ledger.len();
    ledger.clear();
    *st.dedupe.lock().unwrap_or_else(PoisonError::into_inner) = Dedupe::default();
    Json(json!({"cleared_keys": cleared}))
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, Json(json!({"error": "not found"}))).into_response()
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutting down");
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_ansi(std::io::stdout().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();

    let args = Args::parse();
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    tracing::info!(
        listen = %listener.local_addr()?,
        latency = %humantime::format_duration(args.latency),
        fail_rate = args.fail_rate,
        fail_status = args.fail_status.as_u16(),
        reset_rate = args.reset_rate,
        dedupe = args.dedupe,
        "demo-upstream listening"
    );

    let state: Shared = Arc::new(AppState {
        args,
        ledger: Mutex::new(HashMap::new()),
        seq: AtomicU64::new(0),
        dedupe: Mutex::new(Dedupe::default()),
    });
    let app = Router::new()
        .route("/_demo/health", get(health))
        .route("/_demo/executions", get(executions))
        .route("/_demo/reset", post(reset))
        .route("/v1/completions", post(llm::generate))
        .route("/v1/{*rest}", any(v1))
        .fallback(not_found)
        .layer(middleware::from_fn(access_log))
        .with_state(state);

    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal())
        .await?;
    Ok(())
}
