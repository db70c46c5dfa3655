//! What the driver records: each attempt's answer (status, headers, body) and the
//! exchanges of a scenario, in the order they ended.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::client::send;
use super::Req;

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
