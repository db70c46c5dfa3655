//! `POST /v1/completions`: a fake LLM API (named as the LLM APIs name it), the streaming
//! side of the demo upstream (for live keyed streaming through the gateway, its tests and
//! its bench). Not to be confused with a completion of a key (the stored answer).
//!
//! The JSON body `{"prompt": "...", "stream": true, "max_tokens": 20, "token_ms": 100}`
//! (every field optional; unknown fields ignored, as a real completion API takes many):
//!
//! * `"stream": true`: `200`, `Content-Type: text/event-stream`, no `Content-Length`
//!   (chunked on HTTP/1.1); one Server-Sent Event per token, token `i` (1-based) sent
//!   `i * token_ms` after the request's head (`id: <i>` and a `data:` line of JSON
//!   `{"id":"cmpl_<n>","object":"text_completion","choices":[{"index":0,"text":...,
//!   "finish_reason":...}]}`), then `data: [DONE]`;
//! * otherwise: the whole completion as one JSON document (with `Content-Length`),
//!   answered after `max_tokens * token_ms`.
//!
//! Defaults: 20 tokens, 100 ms apart (two seconds an answer). Bounds: `max_tokens`
//! 1 to 10000, `token_ms` 0 to 1000, and their product at most 60 s; a body out of
//! bounds or not JSON is 400 and executes nothing.
//!
//! A completion is a side effect like a payment: it is recorded in the ledger (per
//! `Idempotency-Key`, `GET /_demo/executions`) when it starts, before the first byte,
//! and runs to its end even when its caller hangs up (the events are produced by a task
//! of their own; only their delivery stops). The `/v1/` knobs apply: `--latency` or
//! `?latency_ms=` before the head, `?status=` and `--fail-rate` (failures that execute
//! nothing). `--dedupe` does not apply: every completion executes.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{tagged, Overrides, Shared};

/// Most tokens one completion may ask for.
const MAX_TOKENS: u32 = 10_000;
/// Longest gap between two tokens.
const MAX_TOKEN_MS: u64 = 1_000;
/// Longest a whole completion may take (`max_tokens * token_ms`).
const MAX_TOTAL: Duration = Duration::from_secs(60);
/// Events produced and not yet taken by hyper, per stream.
const EVENTS_AHEAD: usize = 16;

/// The words tokens are drawn from, in turn (deterministic: the same request asks for
/// the same text; only the `id` tells executions apart).
const WORDS: [&str; 16] = [
    "The",
    " gateway",
    " forwards",
    " the",
    " first",
    " request",
    " with",
    " a",
    " key",
    ",",
    " stores",
    " its",
    " answer",
    " and",
    " replays",
    " it.",
];

/// The request body, as a completion API takes it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct GenerateRequest {
    prompt: String,
    stream: bool,
    max_tokens: Option<u32>,
    token_ms: Option<u64>,
}

/// A validated completion: how many tokens, how far apart.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Shape {
    tokens: u32,
    gap: Duration,
}

impl GenerateRequest {
    fn shape(&self) -> Result<Shape, String> {
        let tokens = self.max_tokens.unwrap_or(20);
        let token_ms = self.token_ms.unwrap_or(100);
        if !(1..=MAX_TOKENS).contains(&tokens) {
            return Err(format!("max_tokens must be 1 to {MAX_TOKENS}"));
        }
        if token_ms > MAX_TOKEN_MS {
            return Err(format!("token_ms must be 0 to {MAX_TOKEN_MS}"));
        }
        let gap = Duration::from_millis(token_ms);
        if gap * tokens > MAX_TOTAL {
            return Err(format!(
                "max_tokens * token_ms must be at most {} ms",
                MAX_TOTAL.as_millis()
            ));
        }
        Ok(Shape { tokens, gap })
    }
}

/// The text of token `i` (0-based).
fn word(i: u32) -> &'static str {
    WORDS[i as usize % WORDS.len()]
}

/// The Server-Sent Event of token `i` (0-based) of `n` in completion `id`.
fn event(id: &str, i: u32, n: u32) -> Bytes {
    let finish = if i + 1 == n {
        json!("length")
    } else {
        Value::Null
    };
    let data = json!({
        "id": id,
        "object": "text_completion",
        "choices": [{"index": 0, "text": word(i), "finish_reason": finish}],
    });
    Bytes::from(format!("id: {}\ndata: {data}\n\n", i + 1))
}

/// The stream's last event.
const DONE: &[u8] = b"data: [DONE]\n\n";

/// `POST /v1/completions`.
pub(super) async fn generate(
    State(st): State<Shared>,
    Query(q): Query<Overrides>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let key = super::key_of(&headers);
    let req: GenerateRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return rejected(format!("the body is not a completion request: {e}")),
    };
    let shape = match req.shape() {
        Ok(s) => s,
        Err(e) => return rejected(e),
    };
    let latency = q.latency_ms.map_or(st.args.latency, Duration::from_millis);
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    let forced = match q.status.map(StatusCode::from_u16) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(_)) => return rejected("invalid status override".into()),
    };
    if let Some(failed) = st.simulated_failure(forced) {
        return failed;
    }
    let (n, key_count) = st.record(&key);
    let id = format!("cmpl_{n}");
    let execution = [
        ("x-demo-execution", HeaderValue::from(n)),
        ("x-demo-key-executions", HeaderValue::from(key_count)),
    ];
    if req.stream {
        let head = [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ];
        let events = Body::new(Events(produce(id, shape)));
        return tagged(
            "executed, streaming",
            (StatusCode::OK, head, execution, events),
        );
    }
    tokio::time::sleep(shape.gap * shape.tokens).await;
    let text: String = (0..shape.tokens).map(word).collect();
    let body = json!({
        "id": id,
        "object": "text_completion",
        "choices": [{"index": 0, "text": text, "finish_reason": "length"}],
        "usage": {
            "prompt_tokens": req.prompt.split_whitespace().count(),
            "completion_tokens": shape.tokens,
        },
        "key_executions": key_count,
    });
    tagged("executed", (StatusCode::OK, execution, Json(body)))
}

fn rejected(error: String) -> Response {
    tagged(
        "rejected",
        (StatusCode::BAD_REQUEST, Json(json!({"error": error}))),
    )
}

/// Starts the task that produces completion `id`'s events on schedule (token `i` at
/// `i * gap` from now, then `[DONE]`); it runs to the end whether or not anyone reads.
fn produce(id: String, shape: Shape) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(EVENTS_AHEAD);
    let start = Instant::now();
    tokio::spawn(async move {
        let mut reader = Some(tx);
        for i in 0..shape.tokens {
            tokio::time::sleep_until(start + shape.gap * (i + 1)).await;
            if let Some(tx) = &reader {
                if tx.send(event(&id, i, shape.tokens)).await.is_err() {
                    reader = None; // the caller hung up: the completion goes on unread
                }
            }
        }
        if let Some(tx) = reader {
            let _ = tx.send(Bytes::from_static(DONE)).await;
        }
    });
    rx
}

/// The response body: the events as the producer sends them; ends after `[DONE]`.
struct Events(mpsc::Receiver<Bytes>);

impl hyper::body::Body for Events {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        (self.0.poll_recv(cx)).map(|event| event.map(|e| Ok(hyper::body::Frame::data(e))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(max_tokens: Option<u32>, token_ms: Option<u64>) -> GenerateRequest {
        GenerateRequest {
            max_tokens,
            token_ms,
            ..Default::default()
        }
    }

    #[test]
    fn the_default_is_twenty_tokens_100_ms_apart() {
        let shape = request(None, None).shape().unwrap();
        assert_eq!(shape.tokens, 20);
        assert_eq!(shape.gap, Duration::from_millis(100));
    }

    #[test]
    fn out_of_bounds_requests_are_refused() {
        assert!(request(Some(0), None).shape().is_err());
        assert!(request(Some(MAX_TOKENS + 1), Some(0)).shape().is_err());
        assert!(request(None, Some(MAX_TOKEN_MS + 1)).shape().is_err());
        assert!(request(Some(1000), Some(100)).shape().is_err()); // 100 s
        assert!(request(Some(MAX_TOKENS), Some(0)).shape().is_ok());
    }

    #[test]
    fn an_event_is_one_sse_event_and_the_last_one_says_why_it_ended() {
        let first = event("cmpl_1", 0, 2);
        let text = std::str::from_utf8(&first).unwrap();
        assert!(text.starts_with("id: 1\ndata: {"), "{text}");
        assert!(text.ends_with("}\n\n") && text.matches('\n').count() == 3);
        let data: Value = serde_json::from_str(&text[12..text.len() - 2]).unwrap();
        assert_eq!(data["choices"][0]["text"], "The");
        assert_eq!(data["choices"][0]["finish_reason"], Value::Null);
        let last = event("cmpl_1", 1, 2);
        assert!(std::str::from_utf8(&last)
            .unwrap()
            .contains("\"finish_reason\":\"length\""));
    }
}
