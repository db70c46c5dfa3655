//! From a retry to the one call that ran: a replay's span, on any replica, links to the
//! span of the execution whose answer it sends, and names its trace.

use std::time::Duration;

use super::{endpoint, one, parts, spans_of, upstream_parent, Collector, Exported, Traced};
use crate::support::{eventually, until_rows, PgServer, RedisServer, SseUpstream};

/// The exported server span of `trace`.
async fn server_span(collector: &Collector, trace_id: &str) -> Exported {
    let spans = spans_of(collector, trace_id, &[("POST", 2)]).await;
    one(&spans, "POST", 2).clone()
}

#[tokio::test]
async fn a_replay_on_another_replica_links_to_the_execution() {
    let (redis, upstream, collector) = parts().await;
    let endpoint = endpoint(&collector);
    let first = Traced::start(&redis, &upstream, &endpoint).await;
    let second = Traced::start(&redis, &upstream, &endpoint).await;
    assert_eq!(first.post("linked", None).await, 201);
    let (execution_trace, _) = upstream_parent(&upstream, 0);
    let execution = server_span(&collector, &execution_trace).await;

    // The retry, on the other replica and in a trace of its own.
    let retry_trace = "5".repeat(32);
    let retry = format!("00-{retry_trace}-{}-01", "6".repeat(16));
    assert_eq!(second.post("linked", Some(&retry)).await, 201);
    assert_eq!(upstream.executions(), 1, "replayed, not run again");
    let replay = server_span(&collector, &retry_trace).await;
    assert_eq!(replay.attributes["idempotency.outcome"], "replayed");
    assert_eq!(replay.attributes["idempotency.replay_of"], execution_trace);
    assert_eq!(
        replay.links,
        vec![(execution.trace_id.clone(), execution.span_id.clone())],
        "the replay links to the execution's span"
    );
    assert!(execution.links.is_empty());
    // The first replica's own replay (from its replay cache) links the same way.
    assert_eq!(first.post("linked", None).await, 201);
    let replays = || -> Vec<Exported> {
        let spans = collector.spans().into_iter().filter(|s| s.kind == 2);
        spans
            .filter(|s| {
                s.attributes
                    .get("idempotency.outcome")
                    .is_some_and(|o| o == "replayed")
            })
            .collect()
    };
    assert!(eventually(Duration::from_secs(10), async || replays().len() == 2).await);
    assert!(
        replays().iter().all(|s| s.links == replay.links),
        "{:#?}",
        replays()
    );
}

#[tokio::test]
async fn a_replay_read_from_postgres_links_to_the_execution() {
    let ((redis, upstream, collector), pg) = (parts().await, PgServer::start());
    let endpoint = endpoint(&collector);
    let durable = pg.section("");
    let first = Traced::start_with(&redis, &upstream, &endpoint, &durable, &[]).await;
    assert_eq!(first.post("kept", None).await, 201);
    let (execution_trace, _) = upstream_parent(&upstream, 0);
    let execution = server_span(&collector, &execution_trace).await;
    until_rows(&pg, "state = 'completed' AND origin IS NOT NULL", 1).await;
    // Redis loses the record: the other replica's retry is answered from Postgres.
    redis.cli(&["FLUSHALL"]);
    let second = Traced::start_with(&redis, &upstream, &endpoint, &durable, &[]).await;
    let retry_trace = "7".repeat(32);
    let retry = format!("00-{retry_trace}-{}-01", "8".repeat(16));
    assert_eq!(second.post("kept", Some(&retry)).await, 201);
    assert_eq!(
        upstream.executions(),
        1,
        "replayed from Postgres, not run again"
    );
    let replay = server_span(&collector, &retry_trace).await;
    assert_eq!(replay.attributes["idempotency.outcome"], "replayed");
    assert_eq!(replay.attributes["idempotency.replay_of"], execution_trace);
    assert_eq!(replay.links, vec![(execution.trace_id, execution.span_id)]);
}

#[tokio::test]
async fn a_duplicate_that_waited_for_the_execution_links_to_it() {
    let (redis, upstream, collector) = parts().await;
    upstream.set_delay(Duration::from_millis(1500));
    let endpoint = endpoint(&collector);
    let waits = "[idempotency]\nin_flight = \"wait\"\nwait_timeout = \"20s\"\n";
    let (first, second) = (
        Traced::start_with(&redis, &upstream, &endpoint, waits, &[]).await,
        Traced::start_with(&redis, &upstream, &endpoint, waits, &[]).await,
    );
    let waiter_trace = "9".repeat(32);
    let waiter = format!("00-{waiter_trace}-{}-01", "a".repeat(16));
    let duplicate = async {
        upstream.until_executions(1).await; // the first holds the key
        second.post("waited", Some(&waiter)).await
    };
    let (held, waited) = tokio::join!(first.post("waited", None), duplicate);
    assert_eq!((held, waited), (201, 201));
    assert_eq!(upstream.executions(), 1);
    let (execution_trace, _) = upstream_parent(&upstream, 0);
    let execution = server_span(&collector, &execution_trace).await;
    let replay = server_span(&collector, &waiter_trace).await;
    assert_eq!(replay.attributes["idempotency.outcome"], "replayed");
    assert_eq!(replay.links, vec![(execution.trace_id, execution.span_id)]);
    // Its wait is a span of its own, inside its claim.
    let spans = spans_of(&collector, &waiter_trace, &[("wait", 1), ("claim", 1)]).await;
    let claim = one(&spans, "claim", 1);
    assert_eq!(one(&spans, "wait", 1).parent_span_id, claim.span_id);
}

#[tokio::test]
async fn a_joiner_of_a_live_answer_links_to_the_execution() {
    let (redis, collector) = (RedisServer::start(), Collector::start().await);
    let upstream = SseUpstream::start().await;
    let endpoint = endpoint(&collector);
    let waits = "[idempotency]\nin_flight = \"wait\"\nwait_timeout = \"20s\"\n";
    let (url, env) = (upstream.url(), &[]);
    let first = Traced::start_on(&redis, &url, &endpoint, waits, env).await;
    let second = Traced::start_on(&redis, &url, &endpoint, waits, env).await;
    let stream = async |gateway: &Traced, trace: &str| {
        let url = format!(
            "http://127.0.0.1:{}/v1/stream?events=10&gap_ms=200",
            gateway.listen
        );
        let response = reqwest::Client::new()
            .post(url)
            .header("Idempotency-Key", "joined")
            .header("traceparent", format!("00-{trace}-{}-01", "e".repeat(16)))
            .body("{}")
            .send()
            .await
            .unwrap();
        let replayed = response.headers()["idempotent-replayed"].to_str().unwrap();
        (replayed.to_string(), response.bytes().await.unwrap())
    };
    let (execution_trace, joiner_trace) = ("d".repeat(32), "f".repeat(32));
    let joiner = async {
        // The first is streaming its answer when the duplicate comes.
        let sent = async || (upstream.of("joined").first()).is_some_and(|e| e.sent.len() >= 2);
        assert!(eventually(Duration::from_secs(10), sent).await);
        stream(&second, &joiner_trace).await
    };
    let (ran, joined) = tokio::join!(stream(&first, &execution_trace), joiner);
    assert_eq!((ran.0.as_str(), joined.0.as_str()), ("false", "true"));
    assert!(joined.1 == ran.1, "the joiner got the stream the first got");
    assert_eq!(upstream.executions_of("joined"), 1);
    let live = (redis.keys().await.into_iter()).filter(|k| k.ends_with("}:live"));
    assert_eq!(live.count(), 1, "joined through the key's live stream");
    let execution = server_span(&collector, &execution_trace).await;
    let replay = server_span(&collector, &joiner_trace).await;
    assert_eq!(replay.attributes["idempotency.outcome"], "replayed");
    assert_eq!(replay.attributes["idempotency.replay_of"], execution_trace);
    assert_eq!(replay.links, vec![(execution.trace_id, execution.span_id)]);
}

#[tokio::test]
async fn the_completers_call_links_to_the_abandoned_one() {
    let ((redis, upstream, collector), pg) = (parts().await, PgServer::start());
    upstream.set_delay(Duration::from_millis(3000));
    let endpoint = endpoint(&collector);
    // A short lease (and Redis commands bounded to match): the completer comes soon.
    let completing = format!(
        "{}[idempotency]\ncompleter = true\nlock_ttl = \"2s\"\n",
        pg.section("completer_interval = \"300ms\"\ncompleter_grace = \"0s\"")
    );
    let holder = Traced::start_with(&redis, &upstream, &endpoint, &completing, &[]).await;
    let abandoned_trace = "b".repeat(32);
    let caller = format!("00-{abandoned_trace}-{}-01", "c".repeat(16));
    let url = format!("http://127.0.0.1:{}/v1/payments", holder.listen);
    let call = tokio::spawn(async move {
        let request = reqwest::Client::new()
            .post(url)
            .header("traceparent", caller);
        let _ = request
            .header("Idempotency-Key", "abandoned")
            .body("{}")
            .send()
            .await;
    });
    upstream.until_executions(1).await;
    // The holder's claim span is exported before it dies.
    let spans = spans_of(&collector, &abandoned_trace, &[("claim", 1)]).await;
    let claim = one(&spans, "claim", 1).clone();
    drop(holder); // SIGKILL, mid-call
    let _ = call.await;
    let _completer = Traced::start_with(&redis, &upstream, &endpoint, &completing, &[]).await;
    let completed = eventually(Duration::from_secs(20), async || {
        (collector.spans().iter()).any(|s| s.name == "completer")
    });
    assert!(
        completed.await,
        "a completer span: {:#?}",
        collector.spans()
    );
    let spans = collector.spans();
    let completer = spans.iter().find(|s| s.name == "completer").unwrap();
    assert_eq!(
        completer.attributes["idempotency.completes"],
        abandoned_trace
    );
    assert_eq!(
        completer.links,
        vec![(abandoned_trace.clone(), claim.span_id)],
        "the completer links to the abandoned call"
    );
}
