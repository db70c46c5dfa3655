//! For tests of what crosses the gateway: an upstream that records each request target
//! exactly as it arrived and answers with headers of the test's choosing, and a raw
//! HTTP/1.1 client that sends a request head byte for byte (reqwest would normalise
//! `/../` and `%2e%2e` away, and always sends `Host`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One request as the upstream got it.
#[derive(Clone, Debug)]
pub struct Received {
    /// Path and query, as sent on the request line.
    pub target: String,
    pub headers: HeaderMap,
}

impl Received {
    /// The one value of `name`, if any (panics on several: the tests expect one).
    pub fn header(&self, name: &str) -> Option<&str> {
        let mut all = self.headers.get_all(name).iter();
        let first = all.next().map(|v| v.to_str().unwrap());
        assert!(all.next().is_none(), "several {name} headers: {self:?}");
        first
    }
}

struct Shared {
    received: Mutex<Vec<Received>>,
    answer: Vec<(HeaderName, HeaderValue)>,
}

/// Records every request; answers 201 `{}` with `answer` headers added.
#[derive(Clone)]
pub struct Recorder {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Recorder {
    pub async fn start(answer: &[(&'static str, &'static str)]) -> Self {
        let shared = Arc::new(Shared {
            received: Mutex::default(),
            answer: (answer.iter())
                .map(|(n, v)| (HeaderName::from_static(n), HeaderValue::from_static(v)))
                .collect(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().fallback(handle).with_state(shared.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr, shared }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// The last request received (panics if there was none).
    pub fn last(&self) -> Received {
        self.received()
            .pop()
            .expect("the upstream received nothing")
    }
}

async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let target = (request.uri().path_and_query()).map_or(String::new(), |pq| pq.to_string());
    let headers = request.headers().clone();
    shared
        .received
        .lock()
        .unwrap()
        .push(Received { target, headers });
    let mut response = (StatusCode::CREATED, "{}").into_response();
    for (name, value) in &shared.answer {
        response.headers_mut().append(name.clone(), value.clone());
    }
    response
}

/// An answer read off the wire.
#[derive(Debug)]
pub struct RawAnswer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Vec<u8>,
}

/// Sends `head` (request line and header lines, without the blank line), then `body`
/// with its `Content-Length`, on a new connection with `Connection: close`, and reads
/// the answer to the end. A body of `Content-Length` (which every answer in these
/// tests has) is read as is.
pub async fn raw(addr: SocketAddr, head: &str, body: &str) -> RawAnswer {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{head}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let split = (answer.windows(4))
        .position(|w| w == b"\r\n\r\n")
        .expect("no end of head");
    let head = String::from_utf8(answer[..split].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap();
    let mut headers = reqwest::header::HeaderMap::new();
    for line in lines {
        let (name, value) = line.split_once(':').unwrap();
        headers.append(
            reqwest::header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.trim().parse().unwrap(),
        );
    }
    RawAnswer {
        status: status.parse().unwrap(),
        headers,
        body: answer[split + 4..].to_vec(),
    }
}

/// Starts Redis, a [`Recorder`] answering with `answer` headers, and a gateway
/// configured with `extra` TOML in front of it.
pub async fn recorded_stack(
    answer: &[(&'static str, &'static str)],
    extra: &str,
) -> (super::RedisServer, Recorder, super::TestApp) {
    let redis = super::RedisServer::start();
    let upstream = Recorder::start(answer).await;
    let app = super::TestApp::spawn(super::config(&redis.url(), &upstream.url(), extra)).await;
    (redis, upstream, app)
}
