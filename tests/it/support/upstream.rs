//! A counting mock upstream: records every request it receives and answers with a body
//! that names the execution, so tests can tell which execution a response came from.
//! [`MockUpstream::start_tls`] serves the same over TLS (and records the SNI names sent).

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
    /// The HTTP version the request came in (HTTP/2 from an `h2c` or `h2` route).
    pub version: axum::http::Version,
}

#[derive(Default)]
struct Shared {
    seen: Mutex<Vec<Seen>>,
    statuses: Mutex<VecDeque<u16>>,
    delay: Mutex<Duration>,
    /// Bytes of padding added to every answer's body.
    padding: Mutex<usize>,
    /// The server name of each TLS handshake that completed (TLS only).
    sni: Mutex<Vec<Option<String>>>,
    /// Headers added to every answer, each with a value of its own per execution.
    exchange_headers: Mutex<Vec<&'static str>>,
}

#[derive(Clone)]
pub struct MockUpstream {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    tls: bool,
}

impl MockUpstream {
    pub async fn start() -> Self {
        let shared = Arc::new(Shared::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().fallback(handle).with_state(shared.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            addr,
            shared,
            tls: false,
        }
    }

    /// The same upstream behind TLS with `config`'s certificate.
    pub async fn start_tls(config: Arc<rustls::ServerConfig>) -> Self {
        use tower::ServiceExt;
        let shared = Arc::new(Shared::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let on_handshake = shared.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, app, shared) = (acceptor.clone(), app.clone(), on_handshake.clone());
                tokio::spawn(async move {
                    // A refused handshake (the gateway did not trust us) ends here.
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let sni = tls.get_ref().1.server_name().map(str::to_string);
                    shared.sni.lock().unwrap().push(sni);
                    let service = hyper::service::service_fn(move |request| {
                        app.clone().oneshot(request.map(axum::body::Body::new))
                    });
                    let io = hyper_util::rt::TokioIo::new(tls);
                    // HTTP/1.1 or HTTP/2, as the client speaks (ALPN in `config`, if any).
                    let builder = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    );
                    let _ = builder.serve_connection(io, service).await;
                });
            }
        });
        Self {
            addr,
            shared,
            tls: true,
        }
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The server names (SNI) of the TLS handshakes that completed.
    pub fn sni(&self) -> Vec<Option<String>> {
        self.shared.sni.lock().unwrap().clone()
    }

    /// Every answer waits this long first.
    pub fn set_delay(&self, delay: Duration) {
        *self.shared.delay.lock().unwrap() = delay;
    }

    /// Every answer's body carries `bytes` of padding (a large response).
    pub fn set_padding(&self, bytes: usize) {
        *self.shared.padding.lock().unwrap() = bytes;
    }

    /// Every answer carries these headers (`x-ratelimit-remaining`, `server-timing`),
    /// each valued `execution=N`, so that no two executions send the same value.
    pub fn set_exchange_headers(&self, names: &[&'static str]) {
        *self.shared.exchange_headers.lock().unwrap() = names.to_vec();
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

    /// Waits (up to 10 s) until the upstream has received `n` requests, answered or
    /// not: a call that reached it had its claim made first.
    pub async fn until_executions(&self, n: usize) {
        let within = Duration::from_secs(10);
        let reached = super::eventually(within, async || self.executions() >= n).await;
        assert!(
            reached,
            "the upstream got {} requests, not {n}",
            self.executions()
        );
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    version: axum::http::Version,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let execution = {
        let mut seen = shared.seen.lock().unwrap();
        seen.push(Seen {
            headers,
            body,
            version,
        });
        seen.len()
    };
    let delay = *shared.delay.lock().unwrap();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let status = shared.statuses.lock().unwrap().pop_front().unwrap_or(201);
    let mut response = (
        StatusCode::from_u16(status).unwrap(),
        format!(
            "{{\"execution\":{execution},\"status\":{status}{}}}",
            match *shared.padding.lock().unwrap() {
                0 => String::new(),
                n => format!(",\"pad\":\"{}\"", "x".repeat(n)),
            }
        ),
    )
        .into_response();
    let h = response.headers_mut();
    h.insert("content-type", HeaderValue::from_static("application/json"));
    h.append("set-cookie", HeaderValue::from_static("a=1"));
    h.append("set-cookie", HeaderValue::from_static("b=2"));
    h.insert("x-execution", HeaderValue::from(execution));
    h.insert("connection", HeaderValue::from_static("x-hop"));
    h.insert("x-hop", HeaderValue::from_static("must-not-be-stored"));
    for name in shared.exchange_headers.lock().unwrap().iter() {
        let value = HeaderValue::from_str(&format!("execution={execution}")).unwrap();
        let name = axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap();
        h.append(name, value);
    }
    response
}
