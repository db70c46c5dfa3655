//! Where finished spans go: a bounded queue in front of the SDK's batch processor, and
//! every export run on a runtime of its own (thread `idemgate-otlp`), so that a
//! collector that is down, slow or silent costs a request nothing: spans beyond the
//! queue, and those of an export that failed or ran past `tracing.export_timeout`, are
//! dropped and counted (`idemgate_trace_spans_dropped_total{reason}`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use opentelemetry::Context;
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{BatchSpanProcessor, Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;

use crate::metrics::{self, SpanDrop};
use crate::tls::upstream::Connector;

/// The runtime every export runs on, on a thread of its own; stopped when dropped.
#[derive(Debug)]
pub struct ExportRuntime {
    pub handle: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ExportRuntime {
    pub fn start() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("idemgate-otlp".into())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        Ok(Self {
            handle,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for ExportRuntime {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The SDK's batch processor behind a queue of `cap` spans counted here, so that a span
/// the queue has no room for is counted when dropped (the SDK's own count is private).
#[derive(Debug)]
pub struct Bounded {
    inner: BatchSpanProcessor,
    queued: Arc<AtomicUsize>,
    cap: usize,
}

impl Bounded {
    /// `inner` must export through an [`OnRuntime`] sharing `queued`, and hold at least
    /// `cap` spans itself (then it never drops one of its own accord).
    pub fn new(inner: BatchSpanProcessor, queued: Arc<AtomicUsize>, cap: usize) -> Self {
        Self { inner, queued, cap }
    }
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.cap {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            metrics::spans_dropped(SpanDrop::QueueFull, 1);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// An exporter whose every export runs on the [`ExportRuntime`], bounded in time; the
/// batch leaves the [`Bounded`] queue as it is handed over.
#[derive(Debug)]
pub struct OnRuntime<E> {
    inner: Arc<E>,
    handle: tokio::runtime::Handle,
    queued: Arc<AtomicUsize>,
    timeout: Duration,
}

impl<E> OnRuntime<E> {
    pub fn new(
        inner: E,
        handle: tokio::runtime::Handle,
        queued: Arc<AtomicUsize>,
        timeout: Duration,
    ) -> Self {
        let inner = Arc::new(inner);
        Self {
            inner,
            handle,
            queued,
            timeout,
        }
    }
}

impl<E: SpanExporter + 'static> SpanExporter for OnRuntime<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        self.queued.fetch_sub(spans, Ordering::AcqRel);
        let (inner, timeout) = (self.inner.clone(), self.timeout);
        let export = async move { tokio::time::timeout(timeout, inner.export(batch)).await };
        let result = match self.handle.spawn(export).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(OTelSdkError::Timeout(timeout)),
            Err(e) => Err(OTelSdkError::InternalFailure(e.to_string())),
        };
        if result.is_err() {
            metrics::spans_dropped(SpanDrop::ExportFailed, spans);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.set_resource(resource);
        }
    }
}

/// OTLP over HTTP through the gateway's own client stack (hyper, rustls with the
/// system's roots), on the [`ExportRuntime`]; a collector's answer is read up to 1 MiB.
#[derive(Debug, Clone)]
pub struct OtlpHttp {
    client: Client<Connector, Full<Bytes>>,
}

impl OtlpHttp {
    pub fn new(connector: Connector) -> Self {
        Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
        }
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpHttp {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let request = http::Request::from_parts(parts, Full::new(body));
        let (parts, body) = self.client.request(request).await?.into_parts();
        let body = Limited::new(body, 1 << 20).collect().await?.to_bytes();
        Ok(http::Response::from_parts(parts, body))
    }
}
