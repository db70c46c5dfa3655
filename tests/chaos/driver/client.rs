//! The driver's HTTP client: one keyed attempt and what it got, whether a client
//! retries after it, re-sending until a final answer, and a client that hangs up
//! mid-upload.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;

use super::{Got, Phase, Recorder, Req, Resp};

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(512)
        .connect_timeout(Duration::from_secs(1))
        .tcp_nodelay(true)
        .build()
        .unwrap()
}

pub(super) async fn send(http: &reqwest::Client, base: &str, req: &Req, timeout: Duration) -> Got {
    let response = http
        .post(format!("{base}{}", req.path))
        .header("Idempotency-Key", &req.key)
        .header("Authorization", req.authorization())
        .header("Content-Type", "application/json")
        .body(req.body.clone())
        .timeout(timeout)
        .send()
        .await;
    let response = match response {
        Ok(r) => r,
        Err(e) if e.is_timeout() => return Got::Timeout,
        Err(e) => return Got::Error(format!("{e:?}")),
    };
    let status = response.status().as_u16();
    let mut replayed = None;
    let mut headers = Vec::new();
    for (name, value) in response.headers() {
        match name.as_str() {
            "date" | "x-request-id" => {}
            "idempotent-replayed" => {
                replayed = Some(String::from_utf8_lossy(value.as_bytes()).into_owned())
            }
            n => headers.push((n.to_string(), value.as_bytes().to_vec())),
        }
    }
    match response.bytes().await {
        Ok(body) => Got::Resp(Resp {
            status,
            replayed,
            headers,
            body,
        }),
        Err(e) if e.is_timeout() => Got::Timeout,
        Err(e) => Got::Error(format!("body: {e:?}")),
    }
}

/// Whether a client retries after this answer.
pub fn retryable(got: &Got) -> bool {
    match got {
        Got::Timeout | Got::Error(_) => true,
        Got::Resp(r) if r.is_replay() => false,
        Got::Resp(r) => r.status == 409 || r.status >= 500,
    }
}

/// Re-sends each request until it gets a final answer (or `within` passes), recording
/// every attempt under `phase`. At most `concurrency` at a time.
pub async fn resend_all(
    rec: Arc<Recorder>,
    http: reqwest::Client,
    base: String,
    reqs: Vec<Arc<Req>>,
    phase: Phase,
    within: Duration,
    concurrency: usize,
) {
    let gate = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let deadline = Instant::now() + within;
    let mut tasks = Vec::new();
    for req in reqs {
        let (rec, http, base, gate) = (rec.clone(), http.clone(), base.clone(), gate.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire().await.unwrap();
            loop {
                let got = rec
                    .send(&http, &base, &req, Duration::from_secs(5), phase)
                    .await;
                if !retryable(&got) || Instant::now() > deadline {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
}

/// A client that sends the head and half the body of a keyed request, then hangs up.
pub async fn partial_upload(rec: &Recorder, addr: &str, req: &Req) {
    rec.partial.fetch_add(1, Ordering::Relaxed);
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return;
    };
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {addr}\r\nIdempotency-Key: {}\r\nAuthorization: {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        req.path,
        req.key,
        req.authorization(),
        req.body.len()
    );
    let _ = s.write_all(head.as_bytes()).await;
    let _ = s
        .write_all(&req.body.as_bytes()[..req.body.len() / 2])
        .await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    drop(s);
}
