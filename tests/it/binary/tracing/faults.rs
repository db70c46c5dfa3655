//! A collector that stalls (accepts, never answers) or is down (nothing listens): every
//! answer is the same, none waits on the export, and the spans that could not go are
//! counted in `idemgate_trace_spans_dropped_total`.

use std::time::{Duration, Instant};

use super::{Collector, Traced};
use crate::support::{eventually, metric, MockUpstream, RedisServer};

/// 40 keyed requests one after another: each answered 201, none slower than `bound`.
async fn answers_unchanged(gateway: &Traced, bound: Duration) {
    for n in 0..40 {
        let sent = Instant::now();
        assert_eq!(gateway.post(&format!("fault-{n}"), None).await, 201);
        let took = sent.elapsed();
        assert!(took < bound, "request {n} took {took:?}");
    }
}

/// Waits until the dropped-span counter of `reason` is above 0; its value.
async fn dropped(gateway: &Traced, reason: &str) -> f64 {
    let name = format!("idemgate_trace_spans_dropped_total{{reason=\"{reason}\"}}");
    let mut value = 0.0;
    eventually(Duration::from_secs(10), async || {
        value = metric(&gateway.metrics().await, &name);
        value > 0.0
    })
    .await;
    value
}

#[tokio::test]
async fn a_stalled_collector_slows_no_answer_and_its_spans_are_counted_as_dropped() {
    let (redis, upstream, collector) = (
        RedisServer::start(),
        MockUpstream::start().await,
        Collector::stalled().await,
    );
    // A queue of 8 spans (a request makes 5), an export given up after 2 s.
    let tracing = format!(
        "endpoint = \"{}\"\nqueue_spans = 8\nexport_timeout = \"2s\"",
        collector.url
    );
    let gateway = Traced::start(&redis, &upstream, &tracing).await;
    // Half an export timeout: no request waits for an export.
    answers_unchanged(&gateway, Duration::from_secs(1)).await;
    assert!(dropped(&gateway, "queue_full").await > 0.0);
    assert!(dropped(&gateway, "export_failed").await > 0.0);
    assert_eq!(upstream.executions(), 40);
}

#[tokio::test]
async fn a_collector_that_is_down_changes_no_answer() {
    let (redis, upstream) = (RedisServer::start(), MockUpstream::start().await);
    // A port nothing listens on: every export is refused.
    let closed = idemgate_fleet::free_port();
    let tracing = format!("endpoint = \"http://127.0.0.1:{closed}\"\nexport_timeout = \"2s\"");
    let gateway = Traced::start(&redis, &upstream, &tracing).await;
    answers_unchanged(&gateway, Duration::from_secs(1)).await;
    assert!(dropped(&gateway, "export_failed").await > 0.0);
}
