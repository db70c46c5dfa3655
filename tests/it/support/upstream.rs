//! A counting mock upstream: records every request it receives and answers with a body
//! that names the execution, so tests can tell which execution a response came from.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;

#[derive(Clone, Debug)]
pub struct Seen {
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[derive(Default)]
struct Shared {
    seen: Mutex<Vec<Seen>>,
    statuses: Mutex<VecDeque<u16>>,
    delay: Mutex<Duration>,
}

#[derive(Clone)]
pub struct MockUpstream {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl MockUpstream {
    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().fallback(handle).with_state(shared.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr, shared }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every answer waits this long first.
    pub fn set_delay(&self, delay: Duration) {
        *self.shared.delay.lock().unwrap() = delay;
    }

    /// The next answers use these statuses, in order; then 201.
    pub fn push_statuses(&self, statuses: &[u16]) {
        self.shared.statuses.lock().unwrap().extend(statuses);
    }

    /// Requests received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().unwrap().clone()
    }

    pub fn executions(&self) -> usize {
        self.shared.seen.lock().unwrap().len()
    }
}

async fn handle(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let execution = {
        let mut seen = shared.seen.lock().unwrap();
        seen.push(Seen { headers, body });
        seen.len()
    };
    let delay = *shared.delay.lock().unwrap();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let status = shared.statuses.lock().unwrap().pop_front().unwrap_or(201);
    let mut response = (
        StatusCode::from_u16(status).unwrap(),
        format!("{{\"execution\":{execution},\"status\":{status}}}"),
    )
        .into_response();
    let h = response.headers_mut();
    h.insert("content-type", HeaderValue::from_static("application/json"));
    h.append("set-cookie", HeaderValue::from_static("a=1"));
    h.append("set-cookie", HeaderValue::from_static("b=2"));
    h.insert("x-execution", HeaderValue::from(execution));
    h.insert("connection", HeaderValue::from_static("x-hop"));
    h.insert("x-hop", HeaderValue::from_static("must-not-be-stored"));
    response
}
