//! Distributed tracing, end to end: the `idemgate` binary exporting its spans over
//! OTLP/HTTP to a real receiver ([`collector`]) while a client calls it with (or without)
//! a W3C `traceparent` and the upstream records what it was sent.

mod faults;
mod links;
mod logs;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use idemgate_fleet::otlp::{OtlpCollector as Collector, Span as Exported};

use crate::support::process::{config_file, until_ready, BIN};
use crate::support::{eventually, MockUpstream, RedisServer};

/// A client's trace and span ids, as a `traceparent` sends them.
const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// An `idemgate serve` process with `[tracing]` lines `tracing`, JSON logs into a file.
pub(super) struct Traced {
    child: Child,
    pub(super) listen: u16,
    pub(super) admin: u16,
    log: tempfile::NamedTempFile,
    _config: tempfile::NamedTempFile,
}

impl Drop for Traced {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Traced {
    pub(super) async fn start(redis: &RedisServer, upstream: &MockUpstream, tracing: &str) -> Self {
        Self::start_with(redis, upstream, tracing, "", &[]).await
    }

    /// As [`Self::start`], with `extra` sections (a `[postgres]`) and environment `env`.
    pub(super) async fn start_with(
        redis: &RedisServer,
        upstream: &MockUpstream,
        tracing: &str,
        extra: &str,
        env: &[(&str, &str)],
    ) -> Self {
        Self::start_on(redis, &upstream.url(), tracing, extra, env).await
    }

    /// As [`Self::start_with`], its route's upstream at `upstream`.
    pub(super) async fn start_on(
        redis: &RedisServer,
        upstream: &str,
        tracing: &str,
        extra: &str,
        env: &[(&str, &str)],
    ) -> Self {
        let (listen, admin) = (idemgate_fleet::free_port(), idemgate_fleet::free_port());
        let config = config_file(&format!(
            "[server]\nlisten = \"127.0.0.1:{listen}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\
             [log]\nformat = \"json\"\n[redis]\nurl = \"{}\"\ncommand_timeout = \"500ms\"\n{extra}\n[tracing]\n{tracing}\n\
             [[routes]]\nname = \"p\"\npath_prefix = \"/v1/\"\nupstream = \"{}\"\n\
             upstream_timeout = \"5s\"\n[routes.idempotency]\nanonymous = \"shared\"\n",
            redis.url(),
            upstream
        ));
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut command = Command::new(BIN);
        command.arg("serve").env("IDEMGATE_CONFIG", config.path());
        // Only what the test says: no collector or sampler of the environment's.
        for (name, _) in std::env::vars().filter(|(n, _)| n.starts_with("OTEL_")) {
            command.env_remove(name);
        }
        let mut child = command
            .env_remove("RUST_LOG")
            .env("OTEL_BSP_SCHEDULE_DELAY", "50")
            .envs(env.iter().copied())
            .stderr(Stdio::from(log.reopen().unwrap()))
            .spawn()
            .unwrap();
        until_ready(&mut child, admin, Duration::from_secs(15)).await;
        Self {
            child,
            listen,
            admin,
            log,
            _config: config,
        }
    }

    /// A keyed POST of `key`, with `traceparent` when given: its status.
    pub(super) async fn post(&self, key: &str, traceparent: Option<&str>) -> u16 {
        self.post_as(None, key, traceparent).await
    }

    /// A keyed POST in the scope of `tenant` (its `Authorization`), when given.
    pub(super) async fn post_as(
        &self,
        tenant: Option<&str>,
        key: &str,
        traceparent: Option<&str>,
    ) -> u16 {
        let url = format!("http://127.0.0.1:{}/v1/payments", self.listen);
        let mut request = reqwest::Client::new()
            .post(url)
            .header("Idempotency-Key", key)
            .body("{\"amount\":10}");
        if let Some(tenant) = tenant {
            request = request.header("Authorization", format!("Bearer {tenant}"));
        }
        if let Some(tp) = traceparent {
            request = request.header("traceparent", tp);
        }
        request.send().await.unwrap().status().as_u16()
    }

    pub(super) async fn metrics(&self) -> String {
        let url = format!("http://127.0.0.1:{}/metrics", self.admin);
        reqwest::get(url).await.unwrap().text().await.unwrap()
    }

    /// The JSON `request` log lines, once there are at least `n` (the log is written
    /// by a thread of its own, after the answer).
    async fn request_lines(&self, n: usize) -> Vec<serde_json::Value> {
        self.log_lines("request", n).await
    }

    /// The JSON log lines whose message is `message`, once there are at least `n`.
    pub(super) async fn log_lines(&self, message: &str, n: usize) -> Vec<serde_json::Value> {
        let lines = || {
            let text = std::fs::read_to_string(self.log.path()).unwrap();
            (text.lines())
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|l| l["message"] == message)
                .collect::<Vec<_>>()
        };
        let written = eventually(Duration::from_secs(10), async || lines().len() >= n).await;
        assert!(written, "{n} lines {message:?}: {:#?}", lines());
        lines()
    }
}

/// Redis, the mock upstream and a trace receiver: what most tests here start.
async fn parts() -> (RedisServer, MockUpstream, Collector) {
    let redis = RedisServer::start();
    (redis, MockUpstream::start().await, Collector::start().await)
}

/// The `[tracing]` line that sends spans to `collector`.
fn endpoint(collector: &Collector) -> String {
    format!("endpoint = \"{}\"", collector.url)
}

/// The (trace id, parent span id) of a `traceparent` value.
fn parent_of(traceparent: &str) -> (String, String) {
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    (parts[1].to_string(), parts[2].to_string())
}

/// The `traceparent` the upstream was sent with its `n`th request.
fn upstream_parent(upstream: &MockUpstream, n: usize) -> (String, String) {
    let seen = upstream.seen();
    let value = seen[n]
        .headers
        .get("traceparent")
        .expect("a traceparent upstream");
    parent_of(value.to_str().unwrap())
}

/// The spans of `trace_id`, once a span of each (name, kind) of `wanted` is among them
/// (10 s at most).
async fn spans_of(collector: &Collector, trace_id: &str, wanted: &[(&str, i32)]) -> Vec<Exported> {
    let of_trace = || -> Vec<Exported> {
        let spans = collector.spans().into_iter();
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

fn one<'a>(spans: &'a [Exported], name: &str, kind: i32) -> &'a Exported {
    let found: Vec<_> = (spans.iter())
        .filter(|s| s.name == name && s.kind == kind)
        .collect();
    assert_eq!(found.len(), 1, "one {name} span of kind {kind}: {spans:#?}");
    found[0]
}

#[tokio::test]
async fn a_callers_trace_runs_through_every_phase_to_the_upstream() {
    let (redis, upstream, collector) = parts().await;
    let endpoint = endpoint(&collector);
    let gateway = Traced::start(&redis, &upstream, &endpoint).await;
    let caller = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let sent = gateway.post_as(Some("tenant-secret-91"), "raw-key-7f3a", Some(&caller));
    assert_eq!(sent.await, 201);

    let (trace, parent) = upstream_parent(&upstream, 0);
    assert_eq!(trace, CALLER_TRACE, "the upstream is in the caller's trace");
    assert_ne!(
        parent, CALLER_SPAN,
        "the gateway's span is the upstream's parent"
    );
    let phases = [("identify", 1), ("claim", 1), ("settle", 1)];
    let wanted = [[("POST", 2), ("POST", 3)].as_slice(), &phases].concat();
    let spans = spans_of(&collector, CALLER_TRACE, &wanted).await;
    let server = one(&spans, "POST", 2);
    assert_eq!(server.parent_span_id, CALLER_SPAN);
    assert_eq!(server.service, "idemgate");
    assert_eq!(server.attributes["idempotency.outcome"], "executed");
    assert_eq!(server.attributes["http.route"], "p");
    assert_eq!(server.attributes["http.response.status_code"], "201");
    let line = &gateway.request_lines(1).await[0];
    assert_eq!(
        server.attributes["key_hash"],
        line["key_hash"].as_str().unwrap()
    );
    let client = one(&spans, "POST", 3);
    assert_eq!(
        client.span_id, parent,
        "the upstream's parent is the client span"
    );
    for phase in ["identify", "claim", "settle"] {
        assert_eq!(
            one(&spans, phase, 1).parent_span_id,
            server.span_id,
            "{phase}"
        );
    }
    assert_eq!(
        one(&spans, "claim", 1).attributes["db.system.name"],
        "redis"
    );
    for span in &spans {
        let values = span.attributes.values().chain([&span.name]);
        let secret = |v: &String| v.contains("raw-key") || v.contains("tenant-secret");
        assert!(
            !values.clone().any(secret),
            "no key or scope value: {span:?}"
        );
    }
}

#[tokio::test]
async fn a_request_without_a_valid_traceparent_starts_a_trace_its_log_line_names() {
    let (redis, upstream, collector) = parts().await;
    let endpoint = endpoint(&collector);
    let gateway = Traced::start(&redis, &upstream, &endpoint).await;
    // None, then one the W3C rules refuse (ignored, never answered with an error).
    let invalid = format!("00-{}-{CALLER_SPAN}-01", "0".repeat(32));
    for (n, traceparent) in [None, Some(invalid.as_str())].into_iter().enumerate() {
        assert_eq!(gateway.post(&format!("new-{n}"), traceparent).await, 201);
        let (trace, parent) = upstream_parent(&upstream, n);
        assert_ne!(trace, "0".repeat(32));
        let spans = spans_of(&collector, &trace, &[("POST", 2), ("POST", 3)]).await;
        let server = one(&spans, "POST", 2);
        assert_eq!(server.parent_span_id, "", "a root span");
        assert_eq!(one(&spans, "POST", 3).span_id, parent);
        let lines = gateway.request_lines(n + 1).await;
        let line = &lines[n];
        assert_eq!(line["trace_id"], trace.as_str(), "{line}");
        assert_eq!(line["span_id"], server.span_id.as_str(), "{line}");
    }
}

#[tokio::test]
async fn without_an_endpoint_a_callers_traceparent_reaches_the_upstream_as_it_came() {
    let (redis, upstream) = (RedisServer::start(), MockUpstream::start().await);
    let gateway = Traced::start(&redis, &upstream, "").await;
    let caller = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    assert_eq!(gateway.post("untraced", Some(&caller)).await, 201);
    assert_eq!(
        upstream_parent(&upstream, 0),
        (CALLER_TRACE.into(), CALLER_SPAN.into())
    );
    let line = &gateway.request_lines(1).await[0];
    assert!(line.get("trace_id").is_none(), "{line}");
}

#[tokio::test]
async fn the_otel_variables_alone_send_spans_over_grpc_under_their_service_name() {
    let (redis, upstream, collector) = parts().await;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_SERVICE_NAME", "payments-gateway"),
    ];
    let gateway = Traced::start_with(&redis, &upstream, "", "", &env).await;
    assert_eq!(gateway.post("over-grpc", None).await, 201);
    let (trace, _) = upstream_parent(&upstream, 0);
    let spans = spans_of(&collector, &trace, &[("POST", 2), ("claim", 1)]).await;
    assert_eq!(one(&spans, "POST", 2).service, "payments-gateway");
    assert!(collector.grpc_exports() > 0, "exported over gRPC");
}

#[tokio::test]
async fn a_callers_flag_decides_and_an_unsampled_request_is_passed_through_untouched() {
    let (redis, upstream, collector) = parts().await;
    // None of the traces the gateway would start itself.
    let tracing = format!("endpoint = \"{}\"\nsample_ratio = 0.0", collector.url);
    let gateway = Traced::start(&redis, &upstream, &tracing).await;
    let unsampled = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-00");
    assert_eq!(gateway.post("not-sampled", Some(&unsampled)).await, 201);
    assert_eq!(gateway.post("no-parent", None).await, 201);
    let sampled_trace = "d".repeat(32);
    let sampled = format!("00-{sampled_trace}-{CALLER_SPAN}-01");
    assert_eq!(gateway.post("sampled", Some(&sampled)).await, 201);
    spans_of(&collector, &sampled_trace, &[("POST", 2), ("claim", 1)]).await;
    // The unsampled ones: nothing exported, the caller's context passed on as it came.
    let seen = upstream.seen();
    let header = |n: usize| {
        seen[n]
            .headers
            .get("traceparent")
            .map(|v| v.to_str().unwrap().to_string())
    };
    assert_eq!(header(0).as_deref(), Some(unsampled.as_str()));
    assert_eq!(header(1), None);
    let spans = collector.spans();
    assert!(
        spans.iter().all(|s| s.trace_id == sampled_trace),
        "{spans:#?}"
    );
    let lines = gateway.request_lines(3).await;
    assert!(lines[0].get("trace_id").is_none(), "{}", lines[0]);
    assert_eq!(lines[2]["trace_id"], sampled_trace.as_str());
}
