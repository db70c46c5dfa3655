//! A real OTLP/HTTP receiver for the tracing tests: `POST /v1/traces`, protobuf bodies
//! decoded with the OpenTelemetry protocol's own types, each span kept flat; or one that
//! accepts the connection and never answers (a stalled collector).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message as _;

use crate::support::eventually;

/// One exported span, its ids in lowercase hex.
#[derive(Debug, Clone)]
pub struct Exported {
    pub name: String,
    /// OTLP's: 2 server, 3 client, 1 internal.
    pub kind: i32,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub attributes: BTreeMap<String, String>,
    /// Its links: (trace id, span id).
    pub links: Vec<(String, String)>,
    /// `service.name` of its resource.
    pub service: String,
}

#[derive(Default)]
struct Received {
    spans: Mutex<Vec<Exported>>,
}

/// The receiver, listening on `url` until dropped.
pub struct Collector {
    pub url: String,
    received: Arc<Received>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn text(value: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
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

async fn traces(
    State(received): State<Arc<Received>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    assert_eq!(headers["content-type"], "application/x-protobuf");
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf body");
    let mut spans = received.spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let resource = resource_spans.resource.map(|r| attributes(&r.attributes));
        let service = resource.and_then(|r| r.get("service.name").cloned());
        for scope in resource_spans.scope_spans {
            spans.extend(scope.spans.into_iter().map(|s| {
                Exported {
                    name: s.name,
                    kind: s.kind,
                    trace_id: hex::encode(s.trace_id),
                    span_id: hex::encode(s.span_id),
                    parent_span_id: hex::encode(s.parent_span_id),
                    attributes: attributes(&s.attributes),
                    links: (s.links.iter())
                        .map(|l| (hex::encode(&l.trace_id), hex::encode(&l.span_id)))
                        .collect(),
                    service: service.clone().unwrap_or_default(),
                }
            }));
        }
    }
    StatusCode::OK
}

impl Collector {
    pub async fn start() -> Self {
        let received = Arc::new(Received::default());
        let app = axum::Router::new()
            .route("/v1/traces", post(traces))
            .with_state(received.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            url,
            received,
            task,
        }
    }

    /// A collector that accepts connections and reads nothing, answers nothing.
    pub async fn stalled() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let received = Arc::default();
        Self {
            url,
            received,
            task,
        }
    }

    pub fn spans(&self) -> Vec<Exported> {
        self.received.spans.lock().unwrap().clone()
    }

    /// The spans of `trace_id`, once a span of each (name, kind) of `wanted` is among
    /// them (10 s at most).
    pub async fn trace(&self, trace_id: &str, wanted: &[(&str, i32)]) -> Vec<Exported> {
        let of_trace = || -> Vec<Exported> {
            let spans = self.spans().into_iter();
            spans.filter(|s| s.trace_id == trace_id).collect()
        };
        let complete = eventually(Duration::from_secs(10), async || {
            let spans = of_trace();
            (wanted.iter()).all(|(n, k)| spans.iter().any(|s| s.name == *n && s.kind == *k))
        })
        .await;
        let spans = of_trace();
        assert!(complete, "spans {wanted:?} of trace {trace_id}: {spans:#?}");
        spans
    }
}
