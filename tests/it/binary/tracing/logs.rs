//! The log lines of a traced request, which runs under the exporter's dispatcher: every
//! line logged inside it, on the request's task or a task spawned for it, keeps the
//! request's fields (its id, its trace), as an untraced request's lines do.

use super::{endpoint, Collector, Traced, CALLER_SPAN, CALLER_TRACE};
use crate::support::RedisServer;

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
