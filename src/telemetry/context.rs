//! The W3C trace context of a request: the request's server span continues the
//! caller's `traceparent` (an absent or invalid one starts a trace: the W3C rules, a
//! header is never refused), its ids go into the request's log lines, and every
//! upstream call carries the gateway's own span as the parent. All of it only while
//! spans are exported ([`exporting`]); otherwise the request span is the log's alone
//! and a client's `traceparent` reaches the upstream as it came.
//!
//! Phase spans (identify, claim, wait, upstream, settle) are made only for a traced
//! request, which carries the mark [`Traced`]; an untraced one pays neither the span
//! nor a wrapper around its phases ([`in_span!`]). Their target, [`PHASE`], is one the
//! log filter never enables.

use std::sync::atomic::{AtomicBool, Ordering};

use http::HeaderMap;
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::field::{display, Empty};
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The target of the phase spans, which only the exporter's layer enables, and only
/// inside a traced request.
pub const PHASE: &str = "idemgate::phase";
/// The target of the spans the exporter takes whole: a sampled request's, the
/// completer's.
pub const TRACED: &str = "idemgate::traced";

/// A phase span: `phase!("claim", db.system.name = "redis")`, target [`PHASE`] (the
/// macro spells it out: a target must be a literal).
macro_rules! phase {
    ($name:literal $(, $($fields:tt)*)?) => {
        tracing::info_span!(target: "idemgate::phase", $name $(, $($fields)*)?)
    };
}
pub(crate) use phase;

/// The mark, in a request's extensions, of a request whose spans are exported (a
/// sampled request, one the completer sends again): the phases read it to decide
/// whether to make their spans, so that an untraced request neither asks the
/// subscriber about each phase nor carries a span around each.
#[derive(Clone, Copy, Debug)]
pub struct Traced;

/// Whether the request whose extensions these are is traced ([`Traced`]).
pub fn is_traced(extensions: &http::Extensions) -> bool {
    extensions.get::<Traced>().is_some()
}

/// Awaits `future` inside `span`, where there is one (a traced request's phase:
/// `in_span!(traced.then(|| phase!(..)), future)`); otherwise awaits `future` as it
/// is. A macro, so that the untraced branch builds the future where it is awaited:
/// a wrapper (or a future built first and handed over) is one more copy of it per
/// request, and a span beside it would grow the future of every request. The traced
/// branch is boxed for the same reason.
macro_rules! in_span {
    ($span:expr, $future:expr) => {
        match $span {
            Some(span) => Box::pin(tracing::Instrument::instrument($future, span)).await,
            None => $future.await,
        }
    };
}
pub(crate) use in_span;

/// The W3C header a caller's trace context comes in (a name made once: looked up in
/// every request while spans are exported).
pub const TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");

static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported (`[tracing]` has an endpoint): set once, at start-up.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

pub(super) fn set_exporting() {
    EXPORTING.store(true, Ordering::Relaxed);
}

/// The span of one request on the proxy listener. Where spans are exported and the
/// request is sampled ([`super::sampling`]), it is a server span (target [`TRACED`])
/// whose parent is the caller's `traceparent`, and records its trace and span ids for
/// the log lines inside it; otherwise it is the log's alone, as with tracing off.
/// A traced request is marked ([`Traced`]) for the phases to see.
pub fn request_span<B>(request_id: &str, request: &mut http::Request<B>) -> Span {
    let sampled = || {
        let flag = caller_sampled(request.headers().get(&TRACEPARENT));
        super::sampling::Sampling::get().decide(flag)
    };
    if !(exporting() && sampled()) {
        return tracing::info_span!("request", request_id, route = Empty, key_hash = Empty);
    }
    request.extensions_mut().insert(Traced);
    let (method, headers) = (request.method(), request.headers());
    let caller = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    let span = super::dispatch::made_under(|| {
        tracing::info_span!(
        target: "idemgate::traced",
        "request",
        otel.name = %method,
        otel.kind = "server",
        otel.status_code = Empty,
        request_id,
        route = Empty,
        key_hash = Empty,
        trace_id = Empty,
        span_id = Empty,
        http.request.method = %method,
        http.route = Empty,
        http.response.status_code = Empty,
        idempotency.outcome = Empty,
        )
    });
    let _ = span.set_parent(caller);
    if let Some((trace_id, span_id)) = ids(&span) {
        span.record("trace_id", display(trace_id));
        span.record("span_id", display(span_id));
    }
    span
}

/// A `traceparent`'s sampled flag, when the header is valid by the W3C rules (version
/// 00's layout, hex, a trace id and a parent id not all zeros, not version ff): read
/// without building a context, for every request sampling decides.
fn caller_sampled(traceparent: Option<&http::HeaderValue>) -> Option<bool> {
    let value = traceparent?.as_bytes();
    let hex = |part: &[u8]| part.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    let zeros = |part: &[u8]| part.iter().all(|b| *b == b'0');
    let mut parts = value.split(|b| *b == b'-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let lengths = (version.len(), trace.len(), parent.len(), flags.len()) == (2, 32, 16, 2);
    let valid = lengths
        && [version, trace, parent, flags].iter().all(|p| hex(p))
        && version != b"ff"
        && (version != b"00" || parts.next().is_none())
        && !zeros(trace)
        && !zeros(parent);
    let sampled = u8::from_str_radix(std::str::from_utf8(flags).ok()?, 16).ok()? & 1 == 1;
    valid.then_some(sampled)
}

/// Whether `span` is exported: a traced request's span, a phase span inside one, the
/// completer's. Read from its call site alone, without asking the exporter's layer.
fn traced(span: &Span) -> bool {
    let exported = |t: &str| t == TRACED || t == PHASE;
    exporting() && span.metadata().is_some_and(|m| exported(m.target()))
}

/// The trace and span ids of `span`, when it is exported ([`traced`]).
pub fn ids(span: &Span) -> Option<(opentelemetry::TraceId, opentelemetry::SpanId)> {
    if !traced(span) {
        return None;
    }
    let cx = span.context();
    let span_ref = cx.span();
    let sc = span_ref.span_context();
    sc.is_valid().then(|| (sc.trace_id(), sc.span_id()))
}

/// The current span's trace and span ids as bytes, in a `traced` request ([`Traced`]):
/// the origin a stored response keeps of the execution that produced it. (The current
/// span is not even looked up otherwise.)
pub fn current_origin(traced: bool) -> Option<([u8; 16], [u8; 8])> {
    if !traced {
        return None;
    }
    ids(&Span::current()).map(|(trace, span)| (trace.to_bytes(), span.to_bytes()))
}

/// A replay's span links to the execution its answer came from (`origin`), and says so
/// in `idempotency.replay_of` (that execution's trace id).
pub fn link_replay(span: &Span, (trace_id, span_id): ([u8; 16], [u8; 8])) {
    if !traced(span) {
        return;
    }
    let trace_id = opentelemetry::TraceId::from_bytes(trace_id);
    let execution = opentelemetry::trace::SpanContext::new(
        trace_id,
        opentelemetry::SpanId::from_bytes(span_id),
        opentelemetry::trace::TraceFlags::SAMPLED,
        true,
        Default::default(),
    );
    span.add_link(execution);
    span.set_attribute("idempotency.replay_of", trace_id.to_string());
}

/// The current span's context as a `traceparent` value, in a `traced` request
/// ([`Traced`]): what a kept request carries (for the completer to link to the call it
/// sends again). (The current span is not even looked up otherwise.)
pub fn current_traceparent(traced_request: bool) -> Option<http::HeaderValue> {
    let span = traced_request.then(Span::current).filter(traced)?;
    let mut headers = HeaderMap::new();
    let cx = span.context();
    TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(&mut headers));
    headers.remove(TRACEPARENT)
}

/// The completer's span links to the abandoned call whose kept request carries
/// `headers` (its `traceparent`), and says so in `idempotency.completes` (that call's
/// trace id).
pub fn link_abandoned(span: &Span, headers: &HeaderMap) {
    if !traced(span) {
        return;
    }
    let caller = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    let abandoned = caller.span().span_context().clone();
    if abandoned.is_valid() {
        span.set_attribute("idempotency.completes", abandoned.trace_id().to_string());
        span.add_link(abandoned);
    }
}

/// What the request came to, on its span: the route, the idempotency outcome, the
/// status (a 5xx marks the span as an error).
pub fn record_end(span: &Span, route: Option<&str>, outcome: Option<&str>, status: u16) {
    if !traced(span) {
        return;
    }
    if let Some(route) = route {
        span.record("http.route", route);
    }
    if let Some(outcome) = outcome {
        span.record("idempotency.outcome", outcome);
    }
    span.record("http.response.status_code", status);
    if status >= 500 {
        span.record("otel.status_code", "error");
    }
}

/// The span of one upstream call (a client span), for a traced request ([`Traced`]).
pub fn upstream_span(request: &http::request::Parts, route: &str) -> Option<Span> {
    let method = &request.method;
    is_traced(&request.extensions).then(|| {
        phase!(
            "upstream",
            otel.name = %method,
            otel.kind = "client",
            http.request.method = %method,
            route,
        )
    })
}

/// Sets `traceparent` (and drops `tracestate`, unless the context carries one) on an
/// upstream request: `span`, the call's span, is its parent.
pub fn inject(span: Option<&Span>, headers: &mut HeaderMap) {
    let Some(span) = span.filter(|span| traced(span)) else {
        return;
    };
    headers.remove("tracestate");
    let cx = span.context();
    TraceContextPropagator::new().inject_context(&cx, &mut HeaderInjector(headers));
    if headers.get("tracestate").is_some_and(|v| v.is_empty()) {
        headers.remove("tracestate");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_by_the_w3c_rules() {
        let read = |v: &str| caller_sampled(Some(&http::HeaderValue::from_str(v).unwrap()));
        let (trace, parent) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
        assert_eq!(read(&format!("00-{trace}-{parent}-01")), Some(true));
        assert_eq!(read(&format!("00-{trace}-{parent}-00")), Some(false));
        assert_eq!(
            read(&format!("01-{trace}-{parent}-03-more")),
            Some(true),
            "a later version"
        );
        for invalid in [
            format!("00-{trace}-{parent}-01-more"),
            format!("ff-{trace}-{parent}-01"),
            format!("00-{}-{parent}-01", "0".repeat(32)),
            format!("00-{trace}-{}-01", "0".repeat(16)),
            format!("00-{}-{parent}-01", trace.to_uppercase()),
            format!("00-{trace}-{parent}"),
            "garbage".to_string(),
        ] {
            assert_eq!(read(&invalid), None, "{invalid}");
        }
        assert_eq!(caller_sampled(None), None);
    }
}
