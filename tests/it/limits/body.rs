//! A body over `server.max_request_body` is answered with the 413
//! problem even when the client writes its whole body before reading (Python's
//! `http.client`, many embedded clients). The gateway reads and discards what is still
//! coming (lingering close), bounded by `server.linger_bytes` and `server.linger_time`.
//! These tests speak HTTP/1.1 over a raw socket, as such a client does.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{stack, TestApp};

const LIMIT: &str = "[server]\nmax_request_body = \"64KiB\"\n";
/// Larger than the loopback socket buffers, so unread bytes are left when it closes.
const BIG: usize = 6 << 20;

/// A response read off a raw socket.
struct RawResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl RawResponse {
    fn header(&self, name: &str) -> Option<&str> {
        (self.headers.iter())
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn problem_code(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        let v: serde_json::Value = serde_json::from_slice(&self.body).unwrap();
        v["code"].as_str().unwrap().to_string()
    }
}

/// Reads one response (head, then `Content-Length` bytes of body).
async fn read_response(stream: &mut TcpStream) -> std::io::Result<RawResponse> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("closed after {} bytes of response", buf.len()),
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap()[9..12].parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = (headers.iter())
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse().unwrap());
    let mut body = buf[head_end..].to_vec();
    while body.len() < len {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok(RawResponse {
        status,
        headers,
        body,
    })
}

/// The head of a keyed POST to `/v1/payments` with `framing` as its last header line.
fn head(app: &TestApp, key: &str, framing: &str) -> String {
    format!(
        "POST /v1/payments HTTP/1.1\r\nHost: {}\r\nIdempotency-Key: {key}\r\n\
         Content-Type: application/json\r\n{framing}\r\n\r\n",
        app.addr
    )
}

/// Writes everything first, then reads, as Python's `http.client` does.
async fn write_all_then_read(stream: &mut TcpStream, request: &[u8]) -> RawResponse {
    let exchange = async {
        stream.write_all(request).await.map_err(|e| ("write", e))?;
        read_response(stream).await.map_err(|e| ("read", e))
    };
    match tokio::time::timeout(Duration::from_secs(20), exchange).await {
        Ok(Ok(response)) => response,
        Ok(Err((step, e))) => panic!("{step} failed instead of a 413: {e} ({:?})", e.kind()),
        Err(_) => panic!("no answer within 20 s"),
    }
}

fn chunked(total: usize, chunk: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(total + total / chunk * 12 + 8);
    let mut left = total;
    while left > 0 {
        let n = left.min(chunk);
        out.extend_from_slice(format!("{n:x}\r\n").as_bytes());
        out.resize(out.len() + n, b'y');
        out.extend_from_slice(b"\r\n");
        left -= n;
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

#[tokio::test]
async fn declared_oversized_body_written_before_reading_still_gets_the_413() {
    let (redis, upstream, app) = stack(LIMIT).await;
    let mut request = head(&app, "big-declared", &format!("Content-Length: {BIG}")).into_bytes();
    request.resize(request.len() + BIG, b'x');
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    let response = write_all_then_read(&mut stream, &request).await;
    assert_eq!(response.status, 413);
    assert_eq!(response.problem_code(), "request_body_too_large");
    assert_eq!(upstream.executions(), 0);
    assert!(redis.records().await.is_empty(), "nothing may be claimed");
    // The whole body was read off the connection, so it serves the next request.
    let next = format!("{}{{}}", head(&app, "big-declared", "Content-Length: 2"));
    let response = write_all_then_read(&mut stream, next.as_bytes()).await;
    assert_eq!(response.status, 201, "the key is still free");
}

#[tokio::test]
async fn chunked_body_growing_past_the_limit_written_before_reading_still_gets_the_413() {
    let (redis, upstream, app) = stack(LIMIT).await;
    let mut request = head(&app, "big-chunked", "Transfer-Encoding: chunked").into_bytes();
    request.extend_from_slice(&chunked(BIG, 16 << 10));
    let started = Instant::now();
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    let response = write_all_then_read(&mut stream, &request).await;
    assert_eq!(response.status, 413);
    assert_eq!(response.problem_code(), "request_body_too_large");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(upstream.executions(), 0);
    assert!(redis.records().await.is_empty(), "nothing may be claimed");
}

#[tokio::test]
async fn expect_100_continue_gets_the_413_instead_of_a_100() {
    let (_redis, upstream, app) = stack(LIMIT).await;
    let framing = format!("Content-Length: {BIG}\r\nExpect: 100-continue");
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    let request = head(&app, "big-expect", &framing);
    let response = write_all_then_read(&mut stream, request.as_bytes()).await;
    assert_eq!(
        response.status, 413,
        "no 100 Continue for a body refused up front"
    );
    assert_eq!(response.problem_code(), "request_body_too_large");
    assert_eq!(upstream.executions(), 0);
}

#[tokio::test]
async fn lingering_stops_after_linger_bytes() {
    // An endless chunked body: discarded up to 1 MiB past the refusal, then the
    // connection closes (long before linger_time), and the client's writes fail.
    let (_redis, _upstream, app) = stack(&format!(
        "{LIMIT}linger_bytes = \"1MiB\"\nlinger_time = \"60s\"\n"
    ))
    .await;
    let mut stream = TcpStream::connect(app.addr).await.unwrap();
    let request = head(&app, "endless", "Transfer-Encoding: chunked");
    stream.write_all(request.as_bytes()).await.unwrap();
    let chunk = chunked(64 << 10, 64 << 10);
    let chunk = &chunk[..chunk.len() - 5]; // without the last-chunk marker
    let mut written = 0usize;
    let started = Instant::now();
    let cut = tokio::time::timeout(Duration::from_secs(15), async {
        while stream.write_all(chunk).await.is_ok() {
            written += chunk.len();
        }
    })
    .await;
    assert!(cut.is_ok(), "still reading after {written} bytes and 15 s");
    assert!(started.elapsed() < Duration::from_secs(15));
    // 1 MiB read and discarded, plus what the loopback socket buffers hold.
    assert!(written < 24 << 20, "cut only after {written} bytes");
}

#[tokio::test]
async fn lingering_stops_after_linger_time() {
    // A declared body over the limit that then trickles in: drained for linger_time,
    // then the connection closes although more is still coming.
    let (_redis, _upstream, app) = stack(&format!("{LIMIT}linger_time = \"700ms\"\n")).await;
    let stream = TcpStream::connect(app.addr).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let request = head(&app, "trickle", "Content-Length: 1048576");
    let started = Instant::now();
    writer.write_all(request.as_bytes()).await.unwrap();
    let trickle = tokio::spawn(async move {
        while writer.write_all(&[b'z'; 1024]).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("the connection closes within 10 s");
    trickle.abort();
    assert!(
        answer.starts_with(b"HTTP/1.1 413"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert!(
        closed >= Duration::from_millis(600),
        "lingered only {closed:?}"
    );
    assert!(closed < Duration::from_secs(3), "lingered {closed:?}");
}
