//! The upstream of the attack tests (`h2_abuse/`) and of the chaos suite's HTTP/2 attack
//! rows: it answers every request 200 after `?ms=` milliseconds (default 0) with `?bytes=`
//! bytes of body (default 2), and counts the calls it has at once and their peak, so a
//! test can tell how many upstream calls a gateway let an attacker hold. A call the
//! gateway abandons (its connection dropped) stops counting when it is dropped.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;

#[derive(Default)]
pub struct Calls {
    /// Calls under way now.
    pub now: AtomicUsize,
    /// The most calls under way at once.
    pub peak: AtomicUsize,
    /// Calls received.
    pub started: AtomicUsize,
    /// Calls answered (not abandoned by the gateway).
    pub answered: AtomicUsize,
}

#[derive(Clone)]
pub struct AttackUpstream {
    pub addr: SocketAddr,
    pub calls: Arc<Calls>,
}

impl AttackUpstream {
    pub async fn start() -> Self {
        let calls = Arc::new(Calls::default());
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(calls.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { addr, calls }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn peak(&self) -> usize {
        self.calls.peak.load(SeqCst)
    }

    pub fn now(&self) -> usize {
        self.calls.now.load(SeqCst)
    }

    pub fn started(&self) -> usize {
        self.calls.started.load(SeqCst)
    }
}

/// One call counted in `now` while it lasts, however it ends.
struct Counted(Arc<Calls>);

impl Counted {
    fn new(calls: Arc<Calls>) -> Self {
        calls.started.fetch_add(1, SeqCst);
        let now = calls.now.fetch_add(1, SeqCst) + 1;
        calls.peak.fetch_max(now, SeqCst);
        Self(calls)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, SeqCst);
    }
}

async fn answer(
    State(calls): State<Arc<Calls>>,
    Query(q): Query<HashMap<String, String>>,
) -> (StatusCode, [(&'static str, &'static str); 1], Vec<u8>) {
    let counted = Counted::new(calls);
    let number = |name: &str| q.get(name).and_then(|v| v.parse::<u64>().ok());
    if let Some(ms) = number("ms") {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let bytes = number("bytes").map_or(2, |b| b as usize);
    counted.0.answered.fetch_add(1, SeqCst);
    let body = if bytes == 2 {
        b"{}".to_vec()
    } else {
        vec![b'r'; bytes]
    };
    (StatusCode::OK, [("content-type", "application/json")], body)
}
