//! The log lines of a traced request, which runs under the exporter's dispatcher: every
//! line logged inside it, on the request's task or a task spawned for it, keeps the
//! request's fields (its id, its trace), as an untraced request's lines do.

use std::time::Duration;

use super::{endpoint, Collector, Traced, CALLER_SPAN, CALLER_TRACE};
use crate::support::{eventually, RedisServer};

#[tokio::test]
async fn a_traced_requests_lines_keep_its_fields_on_every_task() {
    let (redis, collector) = (RedisServer::start(), Collector::start().await);
    // An upstream that refuses: the gateway logs the failed call inside the request.
    let closed = format!("http://127.0.0.1:{}", idemgate_fleet::free_port());
    let gateway = Traced::start_on(&redis, &closed, &endpoint(&collector), "", &[]).await;
    let caller = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let url = format!("http://127.0.0.1:{}/v1/payments", gateway.listen);
    let http = reqwest::Client::new();
    let send = async |keyed: bool| {
        let request = match keyed {
            true => (http.post(&url))
                .header("Idempotency-Key", "refused")
                .body("{}"),
            false => http.get(&url),
        };
        let response = request.header("traceparent", &caller).send().await.unwrap();
        assert!(response.status().is_server_error(), "{response:?}");
        response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_string()
    };
    // Unkeyed: logged on the request's own task. Keyed: on the call's task (the
    // upstream call runs on a task of its own, which may outlive the client).
    let (unkeyed, keyed) = (send(false).await, send(true).await);
    for (message, id) in [
        ("upstream call failed", unkeyed),
        ("upstream call failed; releasing the key", keyed),
    ] {
        let line = &gateway.log_lines(message, 1).await[0];
        let span = &line["span"];
        assert_eq!(span["name"], "request", "{line}");
        assert_eq!(span["request_id"], id.as_str(), "{line}");
        assert_eq!(span["trace_id"], CALLER_TRACE, "{line}");
    }
}

/// A traced request's spans close in the exporter's registry, whichever task drops them
/// last: its own, or one spawned for it (its claim, its call), which runs to the end
/// after the client went away. A registry closes a span's parent through the dispatcher
/// current where the span is dropped: under the log's subscriber alone that parent is an
/// id it does not know, and the gateway panicked ("no such span") at each such drop.
#[tokio::test]
async fn spans_of_traced_requests_whose_clients_go_away_close_without_a_panic() {
    let (redis, upstream, collector) = super::parts().await;
    let gateway = Traced::start(&redis, &upstream, &endpoint(&collector)).await;
    let url = format!("http://127.0.0.1:{}/v1/payments", gateway.listen);
    let impatient = (reqwest::Client::builder())
        .timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    // 20 keyed requests at once (each traced: the default ratio), whose clients leave first.
    let leave = async |prefix: &str| {
        let sends = (0..20).map(|n| {
            let request = (impatient.post(&url))
                .header("Idempotency-Key", format!("{prefix}-{n}"))
                .body("{\"amount\":10}");
            async move { request.send().await.expect_err("the client gives up first") }
        });
        futures_util::future::join_all(sends).await;
    };
    // Their claims outlive them: Redis takes no write for 400 ms (the gateway's command
    // timeout is 500 ms).
    redis.cli(&["CLIENT", "PAUSE", "400", "WRITE"]);
    leave("claim").await;
    // Their calls outlive them: the upstream answers after 300 ms.
    upstream.set_delay(Duration::from_millis(300));
    leave("call").await;
    upstream.set_delay(Duration::ZERO);
    // Every claim and call ran to its end (a retry replays it), and the gateway serves on.
    let log = || std::fs::read_to_string(gateway.log.path()).unwrap();
    for key in (0..20).flat_map(|n| [format!("claim-{n}"), format!("call-{n}")]) {
        let replayed = eventually(Duration::from_secs(10), async || {
            gateway.post(&key, None).await == 201
        });
        assert!(replayed.await, "a retry of {key} answered 201: {}", log());
    }
    assert_eq!(upstream.executions(), 40, "one upstream call per key");
    let log = log();
    assert!(!log.contains("panicked"), "the gateway panicked: {log}");
}
