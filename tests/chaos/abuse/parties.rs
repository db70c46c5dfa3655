//! The parties of the abuse scenario ([`crate::abuse`]): the in-process upstream of the
//! large response, the slow readers, the stalled connections of the burst, the normal
//! clients, and the RSS sampler.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Size of the stored response the slow readers replay.
pub const BIG: usize = 6 << 20;

#[derive(Default)]
pub struct Tally {
    pub attempts: AtomicUsize,
    pub served: AtomicUsize,
    pub refused: AtomicUsize,
    pub cut: AtomicUsize,
    pub failed: AtomicUsize,
}

impl Tally {
    pub fn get(n: &AtomicUsize) -> usize {
        n.load(Relaxed)
    }
}

/// An upstream answering every request with `BIG` bytes, in this process.
pub async fn big_upstream() -> SocketAddr {
    let app = axum::Router::new().fallback(|| async { vec![b'r'; BIG] });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

const BIG_HEADERS: [(&str, &str); 3] = [
    ("Idempotency-Key", "abuse-big"),
    ("Authorization", "Bearer abuser"),
    ("Content-Type", "application/json"),
];

/// Stores the big response; its length as read back.
pub async fn post_big(http: &reqwest::Client, target: SocketAddr) -> Option<usize> {
    let mut request = http.post(format!("http://{target}/bulk/report")).body("{}");
    for (name, value) in BIG_HEADERS {
        request = request.header(name, value);
    }
    let response = request.send().await.ok()?;
    response.bytes().await.ok().map(|b| b.len())
}

/// Replays the big response and reads it at 4 KiB/s, again and again: starting
/// `delay` after the attack, and after each end waiting 1 s (the `Retry-After`)
/// plus `delay` / 10, so that the readers do not come back in step.
pub async fn slow_reader(target: SocketAddr, delay: Duration, until: Instant, tally: Arc<Tally>) {
    tokio::time::sleep(delay).await;
    let mut request = format!("POST /bulk/report HTTP/1.1\r\nHost: {target}\r\n");
    for (name, value) in BIG_HEADERS {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("Content-Length: 2\r\n\r\n{}");
    let mut buf = [0u8; 1024];
    while Instant::now() < until {
        let socket = TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(16 << 10).unwrap();
        let connect = tokio::time::timeout_at(until.into(), socket.connect(target)).await;
        let Ok(Ok(mut stream)) = connect else {
            tally.failed.fetch_add(1, Relaxed);
            continue;
        };
        tally.attempts.fetch_add(1, Relaxed);
        if stream.write_all(request.as_bytes()).await.is_err() {
            tally.failed.fetch_add(1, Relaxed);
            continue;
        }
        let mut first = true;
        loop {
            // A read that is always ready never times out: check the clock too.
            if Instant::now() >= until {
                return;
            }
            match tokio::time::timeout_at(until.into(), stream.read(&mut buf)).await {
                Err(_) => return,
                Ok(Ok(0) | Err(_)) => {
                    tally.cut.fetch_add(1, Relaxed);
                    break;
                }
                Ok(Ok(n)) if first && buf[..n].starts_with(b"HTTP/1.1 503") => {
                    tally.refused.fetch_add(1, Relaxed);
                    break;
                }
                Ok(Ok(_)) => {
                    if first {
                        tally.served.fetch_add(1, Relaxed);
                        first = false;
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
        let back = Instant::now() + Duration::from_secs(1) + delay / 10;
        tokio::time::sleep_until(until.min(back).into()).await;
    }
}

/// A new connection that sends half a request head and stalls.
pub async fn stalled_head(target: SocketAddr, until: Instant, tally: Arc<Tally>) {
    let connect = tokio::time::timeout_at(until.into(), TcpStream::connect(target)).await;
    let Ok(Ok(mut stream)) = connect else {
        tally.failed.fetch_add(1, Relaxed);
        return;
    };
    tally.attempts.fetch_add(1, Relaxed);
    let _ = stream
        .write_all(b"GET /v1/ping HTTP/1.1\r\nHost: x\r\n")
        .await;
    let mut buf = [0u8; 256];
    while Instant::now() < until {
        match tokio::time::timeout_at(until.into(), stream.read(&mut buf)).await {
            Err(_) => return,
            Ok(Ok(0) | Err(_)) => {
                tally.cut.fetch_add(1, Relaxed);
                return;
            }
            Ok(Ok(_)) => {}
        }
    }
}

/// What became of one normal request: its time to a 2xx in ms, or how its last
/// attempt failed.
pub type Outcome = Result<u64, String>;

/// Small keyed requests, one new key after another, each tried up to 5 times.
pub async fn normal_client(
    base: String,
    prefix: String,
    until: Instant,
    outcomes: Arc<Mutex<Vec<Outcome>>>,
) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut n = 0u64;
    while Instant::now() < until {
        n += 1;
        let started = Instant::now();
        let mut outcome = Err(String::new());
        for _ in 0..5 {
            let attempt = http
                .post(format!("{base}/v1/payments?latency_ms=20"))
                .header("Idempotency-Key", format!("{prefix}-{n}"))
                .header("Authorization", "Bearer normal")
                .header("Content-Type", "application/json")
                .body(format!("{{\"amount\":{n}}}"))
                .send()
                .await;
            let failed = match attempt {
                Ok(r) if r.status().is_success() => match r.bytes().await {
                    Ok(_) => {
                        outcome = Ok(started.elapsed().as_millis() as u64);
                        break;
                    }
                    Err(_) => "body error".to_string(),
                },
                Ok(r) => {
                    let status = r.status().as_u16();
                    let body: serde_json::Value = r.json().await.unwrap_or_default();
                    format!("{status} {}", body["code"].as_str().unwrap_or(""))
                }
                Err(e) if e.is_timeout() => "timeout".to_string(),
                Err(_) => "connection error".to_string(),
            };
            outcome = Err(failed);
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        outcomes.lock().unwrap().push(outcome);
    }
}

/// How the failed normal requests' last attempts failed, most frequent first.
pub fn failures(outcomes: &[Outcome]) -> String {
    let mut counts: Vec<(String, usize)> = Vec::new();
    for why in outcomes.iter().filter_map(|o| o.as_ref().err()) {
        match counts.iter_mut().find(|(w, _)| w == why) {
            Some((_, n)) => *n += 1,
            None => counts.push((why.clone(), 1)),
        }
    }
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    let shown: Vec<String> = counts.iter().map(|(w, n)| format!("{w}: {n}")).collect();
    shown.join(", ")
}

/// (`VmRSS`, `VmHWM`) of a process, in KiB.
pub fn rss(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        (status.lines())
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

pub async fn sample_rss(pid: u32, until: Instant, peak: Arc<Mutex<u64>>) {
    while Instant::now() < until + Duration::from_secs(2) {
        if let Some((now, _)) = rss(pid) {
            let mut peak = peak.lock().unwrap();
            *peak = (*peak).max(now);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Replica 0's `idemgate_buffered_bytes` once it reads 0, or its last reading after 5 s
/// (read every `every`; NaN when it could not be read).
pub async fn buffered_after_attack(stack: &crate::cluster::Stack, every: Duration) -> f64 {
    use crate::cluster::Probe;
    let mut buffered = f64::NAN;
    let settle = Instant::now() + Duration::from_secs(5);
    while Instant::now() < settle {
        buffered = (stack.replicas[0]
            .metric(&stack.http, "idemgate_buffered_bytes")
            .await)
            .unwrap_or(f64::NAN);
        if buffered == 0.0 {
            break;
        }
        tokio::time::sleep(every).await;
    }
    buffered
}

/// Replica 0's `idemgate_limited_total` for each of `limits`, as " limit n" pairs (-1
/// when it could not be read).
pub async fn limited_summary(stack: &crate::cluster::Stack, limits: &[&str]) -> String {
    use crate::cluster::Probe;
    let mut limited = String::new();
    for limit in limits {
        let metric = format!("idemgate_limited_total{{limit=\"{limit}\"}}");
        let n = (stack.replicas[0].metric(&stack.http, &metric).await).unwrap_or(-1.0);
        limited.push_str(&format!(" {limit} {n}"));
    }
    limited
}
