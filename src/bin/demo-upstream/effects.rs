//! How a call to the demo acts: it executes (every time, or once per key with
//! `--dedupe`, where a stale fencing token is refused), fails without executing
//! (`--fail-rate`, `?status=`), or executes and then drops the connection without an
//! answer (`--reset-rate`, `?reset=true`).

use std::collections::HashMap;
use std::sync::PoisonError;

use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use serde_json::{json, Value};

use super::{is_transient, tagged, AppState, Overrides};

/// The deduplication state of `--dedupe`.
#[derive(Default)]
pub(super) struct Dedupe {
    /// Key -> the first answer (status, body), replayed to every repeat.
    pub(super) answers: HashMap<String, (StatusCode, Value)>,
    /// Key -> the fencing token of each request received, in arrival order (0: none).
    pub(super) received: HashMap<String, Vec<i64>>,
    pub(super) stale: u64,
    pub(super) completer: u64,
}

/// A response whose body errors immediately: hyper closes the connection
/// without sending anything, which the client observes as a reset.
fn dropped_connection() -> Response {
    (StatusCode::CREATED, Body::new(FailingBody)).into_response()
}

/// A body whose first frame is an error.
struct FailingBody;

impl hyper::body::Body for FailingBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
        std::task::Poll::Ready(Some(Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "demo-upstream: simulated connection reset",
        ))))
    }
}

/// A uniform draw in [0, 1) (splitmix64 over a shared counter seeded from the clock):
/// enough for simulated failure rates, without a random-number crate.
fn chance() -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0);
    let seed = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    };
    let _ = STATE.compare_exchange(0, seed(), Ordering::Relaxed, Ordering::Relaxed);
    let mut z = STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

impl AppState {
    /// `--dedupe`: notes a request received for `key` with its fencing token (0: none).
    pub(super) fn received(&self, key: &str, fence: Option<i64>, from_completer: bool) {
        let mut d = self.dedupe.lock().unwrap_or_else(PoisonError::into_inner);
        d.received
            .entry(key.to_owned())
            .or_default()
            .push(fence.unwrap_or(0));
        d.completer += u64::from(from_completer);
    }

    /// A failure without executing: the `?status=` override if it is transient, else
    /// one drawn at `--fail-rate`.
    pub(super) fn simulated_failure(&self, forced: Option<StatusCode>) -> Option<Response> {
        let fail = match forced {
            Some(s) => is_transient(s),
            None => chance() < self.args.fail_rate,
        };
        if !fail {
            return None;
        }
        let status = forced.unwrap_or(self.args.fail_status);
        let body = json!({"error": "simulated failure", "status": status.as_u16()});
        Some(tagged("failed, not executed", (status, Json(body))))
    }

    /// `--dedupe`: executes `key` once; a repeat gets the first answer, a stale fencing
    /// token 409.
    pub(super) fn execute_once(
        &self,
        key: String,
        fence: Option<i64>,
        forced: Option<StatusCode>,
    ) -> Response {
        let mut d = self.dedupe.lock().unwrap_or_else(PoisonError::into_inner);
        let seen = d.received.get(&key).and_then(|f| f.iter().max().copied());
        if fence.is_some_and(|f| seen.is_some_and(|max| f < max)) {
            d.stale += 1;
            let body = json!({"error": "stale fencing token"});
            return tagged("stale, refused", (StatusCode::CONFLICT, Json(body)));
        }
        if let Some((status, body)) = d.answers.get(&key) {
            return tagged("deduplicated", (*status, Json(body.clone())));
        }
        // The effect and its answer are recorded together, as a real upstream records
        // them in one transaction.
        let (n, _) = self.record(&key);
        let status = forced.unwrap_or(StatusCode::CREATED);
        let body = json!({"id": format!("pay_{n}"), "execution": n, "idempotency_key": key});
        d.answers.insert(key, (status, body.clone()));
        tagged("executed", (status, Json(body)))
    }

    /// Executes `key` (every time), then answers, or drops the connection at
    /// `?reset=true` or `--reset-rate`.
    pub(super) fn execute(
        &self,
        key: String,
        q: &Overrides,
        forced: Option<StatusCode>,
        body: &Bytes,
    ) -> Response {
        let (n, key_count) = self.record(&key);
        let reset = q
            .reset
            .unwrap_or_else(|| forced.is_none() && chance() < self.args.reset_rate);
        if reset {
            return tagged("executed, connection dropped", dropped_connection());
        }
        let amount = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.get("amount").cloned())
            .unwrap_or(Value::Null);
        let body = json!({
            "id": format!("pay_{n}"),
            "execution": n,
            "key_executions": key_count,
            "idempotency_key": key,
            "amount": amount,
        });
        let status = forced.unwrap_or(StatusCode::CREATED);
        let headers = [("x-demo-execution", HeaderValue::from(n))];
        tagged("executed", (status, headers, Json(body)))
    }
}
