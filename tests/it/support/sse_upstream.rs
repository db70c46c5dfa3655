//! A Server-Sent Events upstream for the streaming tests (`tests/it/streaming/`): any
//! request is answered `200 text/event-stream` without `Content-Length` (chunked), with
//! `?events=N` events (default 10) spaced by `?gap_ms=D` (default 200; the first event
//! goes out with the head), each padded with `?size=S` bytes (default 0) so that an
//! answer can be made larger than a limit, after `?head_ms=H` (default 0) before the
//! head; `?status=` another status, `?type=ndjson` as `application/x-ndjson`,
//! `?length=1` with its `Content-Length` (still sent event by event), `?cut_after=N`
//! broken off (the connection closed) after N events, in the next gap. It counts executions per `Idempotency-Key` and keeps, for each, when every
//! event was handed to the connection and whether the whole stream was written (a
//! stream the gateway dropped stops there). Every execution carries a random id of its
//! own (the `x-stream-id` header and every event), so no two executions send the same
//! bytes; `x-ratelimit-remaining` is a header a replay must not repeat.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;

/// What the upstream did for one request.
#[derive(Clone, Debug)]
pub struct Execution {
    /// Its `Idempotency-Key` header, as forwarded by the gateway.
    pub key: Option<String>,
    /// The random id in its `x-stream-id` header and in each of its events.
    pub id: String,
    /// When each event was handed to the connection, in order.
    pub sent: Vec<Instant>,
    /// The events it was asked for.
    pub events: usize,
    /// Whether every event was written (false: still going, or the gateway dropped
    /// the stream first).
    pub finished: bool,
    /// Its number among all executions (from 1), in every event.
    pub number: usize,
    /// The padding of each event.
    pub size: usize,
    /// The HTTP version the request came in.
    pub version: axum::http::Version,
}

impl Execution {
    /// The whole body this execution sends (or sent), byte for byte.
    pub fn body(&self) -> Vec<u8> {
        self.events_from(0)
    }

    /// Its events from `seq` (the one with `id: <seq>`) on, byte for byte.
    pub fn events_from(&self, seq: usize) -> Vec<u8> {
        (seq..self.events)
            .flat_map(|seq| event(self.number, seq, &self.id, self.size).into_bytes())
            .collect()
    }
}

/// Event `seq` of execution `number` with id `id` and `size` bytes of padding.
fn event(number: usize, seq: usize, id: &str, size: usize) -> String {
    format!(
        "id: {seq}\nevent: tick\ndata: {{\"execution\":{number},\"seq\":{seq},\
         \"stream\":\"{id}\",\"pad\":\"{}\"}}\n\n",
        "x".repeat(size)
    )
}

type Shared = Arc<Mutex<Vec<Execution>>>;

#[derive(Clone)]
pub struct SseUpstream {
    pub addr: SocketAddr,
    shared: Shared,
}

impl SseUpstream {
    pub async fn start() -> Self {
        let shared = Shared::default();
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { addr, shared }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The executions of the requests that came with Idempotency-Key `key`, in order.
    pub fn of(&self, key: &str) -> Vec<Execution> {
        (self.shared.lock().unwrap().iter())
            .filter(|e| e.key.as_deref() == Some(key))
            .cloned()
            .collect()
    }

    /// How many requests came with Idempotency-Key `key`.
    pub fn executions_of(&self, key: &str) -> usize {
        self.of(key).len()
    }

    /// The first execution of `key` (panics if there is none).
    pub fn first_of(&self, key: &str) -> Execution {
        let first = self.of(key).into_iter().next();
        first.unwrap_or_else(|| panic!("the upstream never saw key {key}"))
    }
}

/// Notes each event of one execution as it goes out.
struct Progress {
    shared: Shared,
    index: usize,
}

impl Progress {
    fn sent(&self, last: bool) {
        let mut executions = self.shared.lock().unwrap();
        executions[self.index].sent.push(Instant::now());
        executions[self.index].finished = last;
    }
}

async fn answer(
    State(shared): State<Shared>,
    Query(query): Query<HashMap<String, String>>,
    version: axum::http::Version,
    headers: HeaderMap,
) -> Response {
    let param = |name: &str, default: u64| {
        (query.get(name)).map_or(default, |v| v.parse().expect("a number"))
    };
    let (events, gap) = (param("events", 10) as usize, param("gap_ms", 200));
    let (size, head) = (param("size", 0) as usize, param("head_ms", 0));
    let id = format!("{:016x}", rand::random::<u64>());
    let index = {
        let mut executions = shared.lock().unwrap();
        let number = executions.len() + 1;
        executions.push(Execution {
            key: (headers.get("idempotency-key"))
                .map(|k| String::from_utf8_lossy(k.as_bytes()).into_owned()),
            id: id.clone(),
            sent: Vec::new(),
            events,
            finished: events == 0,
            number,
            size,
            version,
        });
        executions.len() - 1
    };
    if head > 0 {
        tokio::time::sleep(Duration::from_millis(head)).await;
    }
    let progress = Progress { shared, index };
    let (execution, header) = (index + 1, HeaderValue::from_str(&id).unwrap());
    let cut = param("cut_after", u64::MAX) as usize;
    let body = futures_util::stream::unfold((0usize, progress), move |(seq, progress)| {
        let id = id.clone();
        async move {
            if seq == events || seq > cut {
                return None;
            }
            if seq > 0 {
                tokio::time::sleep(Duration::from_millis(gap)).await;
            }
            if seq == cut {
                // hyper aborts the answer: the connection closes before the last chunk.
                let cut = std::io::Error::other("the upstream breaks off");
                return Some((Err(cut), (seq + 1, progress)));
            }
            let event = Bytes::from(event(execution, seq, &id, size));
            progress.sent(seq + 1 == events);
            Some((Ok(event), (seq + 1, progress)))
        }
    });
    let mut response = Response::new(Body::from_stream(body));
    *response.status_mut() = StatusCode::from_u16(param("status", 200) as u16).unwrap();
    let h = response.headers_mut();
    let content_type = match query.get("type").map(String::as_str) {
        Some("ndjson") => "application/x-ndjson",
        _ => "text/event-stream",
    };
    h.insert("content-type", HeaderValue::from_static(content_type));
    h.insert("cache-control", HeaderValue::from_static("no-cache"));
    h.insert("x-stream-id", header.clone());
    // Per exchange (the default `replay_omit_headers`): for the first client only.
    h.insert("x-ratelimit-remaining", HeaderValue::from(execution));
    if param("length", 0) == 1 {
        let id = header.to_str().unwrap();
        let length: usize = (0..events)
            .map(|seq| event(execution, seq, id, size).len())
            .sum();
        h.insert("content-length", HeaderValue::from(length));
    }
    response
}
