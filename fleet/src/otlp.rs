//! An OTLP trace receiver on loopback ([`OtlpCollector`]): OTLP/HTTP (`POST
//! /v1/traces`) and OTLP/gRPC (its `Export` method, over h2c), the protobuf bodies decoded with the OpenTelemetry protocol's own types, each span kept
//! flat ([`Span`]) and, when given a file, appended to it as one JSON line. The tracing
//! tests read what a gateway exported from it, `make up` keeps its replicas' traces in
//! `.state/traces.jsonl` through it, and the bench's tracing rows send to it
//! (`idemgate-fleet otlp`). [`OtlpCollector::stalled`] accepts connections and never
//! answers: a collector that hangs.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use prost::Message as _;

/// One exported span, its ids in lowercase hex.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub name: String,
    /// OTLP's: 1 internal, 2 server, 3 client.
    pub kind: i32,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub attributes: BTreeMap<String, String>,
    /// Its links: (trace id, span id).
    pub links: Vec<(String, String)>,
    /// `service.name` of its resource.
    pub service: String,
    pub start_unix_nanos: u64,
    pub end_unix_nanos: u64,
}

impl Span {
    /// One JSON object, as the `make up` file holds it.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "trace_id": self.trace_id, "span_id": self.span_id,
            "parent_span_id": self.parent_span_id, "name": self.name, "kind": self.kind,
            "service": self.service, "attributes": self.attributes,
            "links": self.links, "start_unix_nanos": self.start_unix_nanos,
            "duration_us": self.end_unix_nanos.saturating_sub(self.start_unix_nanos) / 1000,
        })
        .to_string()
    }
}

fn text(value: &Option<AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), text(&kv.value)))
        .collect()
}

/// The spans of one OTLP request body.
pub fn decode(body: &[u8]) -> Result<Vec<Span>, prost::DecodeError> {
    let request = ExportTraceServiceRequest::decode(body)?;
    let mut spans = Vec::new();
    for resource_spans in request.resource_spans {
        let resource = resource_spans.resource.map(|r| attributes(&r.attributes));
        let service = (resource.and_then(|r| r.get("service.name").cloned())).unwrap_or_default();
        for scope in resource_spans.scope_spans {
            spans.extend(scope.spans.into_iter().map(|s| {
                Span {
                    name: s.name,
                    kind: s.kind,
                    trace_id: hex(&s.trace_id),
                    span_id: hex(&s.span_id),
                    parent_span_id: hex(&s.parent_span_id),
                    attributes: attributes(&s.attributes),
                    links: (s.links.iter())
                        .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
                        .collect(),
                    service: service.clone(),
                    start_unix_nanos: s.start_time_unix_nano,
                    end_unix_nanos: s.end_time_unix_nano,
                }
            }));
        }
    }
    Ok(spans)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The file spans are appended to, rotated at [`ROTATE_AT`] bytes (to `FILE.1`): a
/// load test against `make up` does not fill the disk.
struct Appended {
    path: PathBuf,
    file: std::fs::File,
    written: u64,
}

const ROTATE_AT: u64 = 64 << 20;

impl Appended {
    fn open(path: PathBuf) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        let written = file.metadata()?.len();
        Ok(Self {
            path,
            file,
            written,
        })
    }

    fn append(&mut self, spans: &[Span]) -> std::io::Result<()> {
        let regular = || std::fs::metadata(&self.path).is_ok_and(|m| m.is_file());
        if self.written > ROTATE_AT && regular() {
            let mut old = self.path.clone().into_os_string();
            old.push(".1");
            std::fs::rename(&self.path, old)?;
            *self = Self::open(self.path.clone())?;
        }
        for span in spans {
            let line = span.to_json();
            writeln!(self.file, "{line}")?;
            self.written += line.len() as u64 + 1;
        }
        Ok(())
    }
}

#[derive(Default)]
struct Received {
    spans: Mutex<Vec<Span>>,
    file: Option<Mutex<Appended>>,
    /// Neither kept nor written: only decoded (a bench's receiver).
    discard: bool,
    /// Export requests taken over gRPC.
    grpc: std::sync::atomic::AtomicUsize,
}

/// The receiver, listening on [`OtlpCollector::url`] until dropped (on the runtime it
/// was started on).
pub struct OtlpCollector {
    /// `http://127.0.0.1:PORT`: a gateway's `tracing.endpoint`.
    pub url: String,
    received: Arc<Received>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for OtlpCollector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The OTLP/gRPC method (over h2c): its body one length-prefixed message.
const GRPC_EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

type Answer = Response<BoxBody<Bytes, std::convert::Infallible>>;

/// Keeps (or appends) the spans of one export body; whether it decoded.
fn receive(received: &Received, body: &[u8]) -> bool {
    let Ok(spans) = decode(body) else {
        return false;
    };
    if let Some(file) = &received.file {
        let _ = file.lock().unwrap().append(&spans);
    } else if !received.discard {
        received.spans.lock().unwrap().extend(spans);
    }
    true
}

async fn answer(received: Arc<Received>, request: Request<Incoming>) -> Answer {
    let path = request.uri().path().to_string();
    let post = request.method() == hyper::Method::POST;
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let status = |code| {
        let mut response = Response::new(Full::new(Bytes::new()).boxed());
        *response.status_mut() = code;
        response
    };
    match (post, path.as_str()) {
        (true, "/v1/traces") if receive(&received, &body) => status(StatusCode::OK),
        (true, "/v1/traces") => status(StatusCode::BAD_REQUEST),
        // A gRPC message: 1 byte (not compressed), 4 bytes of length, the message.
        (true, GRPC_EXPORT) if body.len() >= 5 && receive(&received, &body[5..]) => {
            (received.grpc).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut trailers = hyper::HeaderMap::new();
            trailers.insert("grpc-status", hyper::header::HeaderValue::from_static("0"));
            // An empty ExportTraceServiceResponse: a zero-length message.
            let message = Full::new(Bytes::from_static(&[0, 0, 0, 0, 0]));
            let body = message.with_trailers(async move { Some(Ok(trailers)) });
            let mut response = Response::new(body.boxed());
            (response.headers_mut()).insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/grpc"),
            );
            response
        }
        _ => status(StatusCode::NOT_FOUND),
    }
}

impl OtlpCollector {
    /// A receiver on a free loopback port (or `port`), keeping what it receives, or
    /// appending it to `file` when given (and keeping nothing: it runs for as long as
    /// the fleet does).
    pub async fn start_on(port: u16, file: Option<PathBuf>) -> std::io::Result<Self> {
        Self::start_keeping(port, file, false).await
    }

    /// As [`Self::start_on`]; with `discard` and no file, spans are decoded and dropped.
    async fn start_keeping(
        port: u16,
        file: Option<PathBuf>,
        discard: bool,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let url = format!("http://{}", listener.local_addr()?);
        let file = match file {
            Some(path) => Some(Mutex::new(Appended::open(path)?)),
            None => None,
        };
        let received = Arc::new(Received {
            file,
            discard,
            ..Received::default()
        });
        let shared = received.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let received = shared.clone();
                let service = hyper::service::service_fn(move |request| {
                    let received = received.clone();
                    async move { Ok::<_, std::convert::Infallible>(answer(received, request).await) }
                });
                // HTTP/1.1 for OTLP/HTTP, h2c for OTLP/gRPC.
                tokio::spawn(async move {
                    let builder = Builder::new(TokioExecutor::new());
                    let _ = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Self {
            url,
            received,
            task,
        })
    }

    pub async fn start() -> Self {
        Self::start_on(0, None).await.expect("a loopback port")
    }

    /// A receiver that accepts connections and reads nothing, answers nothing.
    pub async fn stalled() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        Self {
            url,
            received: Arc::default(),
            task,
        }
    }

    /// How many export requests came over gRPC.
    pub fn grpc_exports(&self) -> usize {
        (self.received.grpc).load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every span received so far (none when they go to a file).
    pub fn spans(&self) -> Vec<Span> {
        self.received.spans.lock().unwrap().clone()
    }
}

/// `idemgate-fleet otlp --port PORT [--out FILE]`: a receiver in the foreground, each
/// span appended to FILE as one JSON line (`make up`), or decoded and dropped (the
/// bench's rows with tracing on).
pub fn main(args: &[String]) -> std::process::ExitCode {
    let (mut port, mut out) = (None, None);
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match (arg.as_str(), it.next()) {
            ("--port", Some(v)) => port = v.parse::<u16>().ok(),
            ("--out", Some(v)) => out = Some(PathBuf::from(v)),
            _ => port = None,
        }
    }
    let Some(port) = port else {
        eprintln!("usage: idemgate-fleet otlp --port PORT [--out FILE]");
        return std::process::ExitCode::from(2);
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let served = runtime.map(|rt| {
        rt.block_on(async {
            let collector = OtlpCollector::start_keeping(port, out, true).await?;
            eprintln!(
                "idemgate-fleet otlp: receiving traces on {}/v1/traces",
                collector.url
            );
            std::future::pending::<std::io::Result<()>>().await
        })
    });
    match served.and_then(|r| r) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idemgate-fleet otlp: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
