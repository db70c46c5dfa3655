//! A completion or release publishes its wake-up only when the record says a
//! duplicate was told "in flight" (`w`, set by `lua/claim.lua` in the same step that
//! answers `I`). These tests fail if a waiter is missed: the lease is 30 s and
//! `wait_timeout` 3 s, so a waiter that hears nothing re-checks only after 3 s (and
//! then replays late, or answers 409). Shown failing with the marker removed from
//! `claim.lua` (nothing published): all three fail.

use std::time::{Duration, Instant};

use fred::prelude::{
    Builder, Client, ClientLike, Config, EventInterface, LuaInterface, PubsubInterface, Value,
};
use fred::types::Message;
use futures_util::future::join_all;
use tokio::sync::broadcast::Receiver;

use crate::support::{config, read, until_subscribed, MockUpstream, RedisServer, TestApp};

const WAIT: &str = "[idempotency]\nin_flight = \"wait\"\nwait_timeout = \"3s\"\n";

/// Two replicas that wait; Redis may be slow under the test load (a 503 is not what
/// these tests are about), so its command timeout is 2 s rather than 300 ms.
async fn replicas(redis: &RedisServer, upstream: &MockUpstream) -> (TestApp, TestApp) {
    let mut cfg = config(&redis.url(), &upstream.url(), WAIT);
    cfg.redis.command_timeout = Duration::from_secs(2);
    let pair = (TestApp::spawn(cfg.clone()).await, TestApp::spawn(cfg).await);
    until_subscribed(redis, 2).await;
    pair
}

/// Duplicates arrive every 10 ms (28 of them) from just after the holder's claim until past its
/// completion, on two replicas, for many keys: some are told "in flight" a moment before
/// the completion lands, some a moment after it. Every one of them must get the
/// holder's response, within the holder's time plus well under `wait_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_waiter_hears_the_completion_however_close_to_it_it_arrives() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let (one, two) = replicas(&redis, &upstream).await;
    let delay = Duration::from_millis(250);
    upstream.set_delay(delay);
    let keys = 8;
    for k in 0..keys {
        let key = format!("race-{k}");
        let started = Instant::now();
        let holder = tokio::spawn(one.post(&key, "{}").send());
        let duplicates = join_all((0..28u64).map(|i| {
            let (app, key) = (if i % 2 == 0 { &two } else { &one }, key.clone());
            async move {
                // Real time: the duplicates are spread across the holder's call.
                tokio::time::sleep(Duration::from_millis(20 + i * 10)).await;
                let answer = read(app.post(&key, "{}").send().await.unwrap()).await;
                (answer, started.elapsed())
            }
        }))
        .await;
        let (status, _, original) = read(holder.await.unwrap().unwrap()).await;
        assert_eq!(status, 201);
        for ((status, headers, body), at) in &duplicates {
            let problem = String::from_utf8_lossy(body);
            assert_eq!(*status, 201, "{key}: answered at {at:?}: {problem}");
            assert_eq!(headers["idempotent-replayed"], "true");
            assert_eq!(body, &original);
            assert!(
                *at < delay + Duration::from_millis(2000),
                "{key}: woken late, at {at:?}"
            );
        }
    }
    assert_eq!(upstream.executions(), keys, "one execution per key");
}

/// A holder that releases (the upstream failed) wakes its waiters: one of them takes
/// the key at once and runs it, the others wait on that one's lease in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_hear_a_release_and_then_the_takeovers_completion() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let (one, two) = replicas(&redis, &upstream).await;
    upstream.set_delay(Duration::from_millis(400));
    upstream.push_statuses(&[503]);
    let started = Instant::now();
    let holder = tokio::spawn(one.post("handoff", "{}").send());
    upstream.until_executions(1).await;
    let waiters = join_all((0..6).map(|i| {
        let app = if i % 2 == 0 { &one } else { &two };
        async move { read(app.post("handoff", "{}").send().await.unwrap()).await }
    }))
    .await;
    let took = started.elapsed();
    assert_eq!(holder.await.unwrap().unwrap().status(), 503);
    for (status, _, body) in &waiters {
        let problem = String::from_utf8_lossy(body);
        assert_eq!(*status, 201, "after {took:?}: {problem}");
    }
    let ran: Vec<_> = (waiters.iter())
        .filter(|(_, h, _)| h["idempotent-replayed"] == "false")
        .collect();
    assert_eq!(ran.len(), 1, "one waiter took over after the release");
    for (_, _, body) in &waiters {
        assert_eq!(body, &ran[0].2, "the others replay the takeover's response");
    }
    assert_eq!(upstream.executions(), 2);
    // Release heard at ~400 ms, the takeover done at ~800 ms; a missed wake-up would
    // have meant a 409 after the 3 s wait_timeout.
    assert!(took < Duration::from_millis(2000), "took {took:?}");
}

/// Runs `lua/claim.lua` on record `rec` as `token`: the reply's tag.
async fn claim_as(client: &Client, rec: &str, token: &str) -> String {
    let keys = vec![rec.to_string(), format!("{rec}:n"), "m".to_string()];
    let args = vec!["fp", token, "5000", "60000", "0"];
    let reply: Vec<Value> = (client.eval(
        concat!(
            include_str!("../../../lua/record.lua"),
            include_str!("../../../lua/claim.lua")
        ),
        keys,
        args,
    ))
    .await
    .unwrap();
    reply[0].as_string().unwrap()
}

/// Runs `lua/complete.lua` (`done` true) or `lua/release.lua` on `rec` as `token`.
async fn settle(client: &Client, rec: &str, token: &str, done: bool) -> i64 {
    let channel = format!("{rec}:done");
    let (script, args) = if done {
        let args = vec![token, "resp", "5000", "fp", &channel, "PUBLISH"];
        (
            concat!(
                include_str!("../../../lua/record.lua"),
                include_str!("../../../lua/complete.lua")
            ),
            args,
        )
    } else {
        (
            concat!(
                include_str!("../../../lua/record.lua"),
                include_str!("../../../lua/release.lua")
            ),
            vec![token, &channel, "PUBLISH"],
        )
    };
    client.eval(script, rec, args).await.unwrap()
}

/// The channel of the next message within 300 ms, if any.
async fn heard(messages: &mut Receiver<Message>) -> Option<String> {
    let message = tokio::time::timeout(Duration::from_millis(300), messages.recv()).await;
    message.ok().map(|m| m.unwrap().channel.to_string())
}

/// The scripts themselves: no message on the record's channel for a completion or
/// release nobody was told to wait for; one once a duplicate was told "in flight".
#[tokio::test]
async fn a_completion_publishes_only_after_a_duplicate_was_told_in_flight() {
    let redis = RedisServer::start();
    let client = redis.client().await;
    let subscriber = Builder::from_config(Config::from_url(&redis.url()).unwrap())
        .build_subscriber_client()
        .unwrap();
    subscriber.init().await.unwrap();
    subscriber.psubscribe("{*}:done").await.unwrap();
    let mut messages = subscriber.message_rx();

    // Nobody was told "in flight": stored, nothing published.
    assert_eq!(claim_as(&client, "{a}", "t1").await, "A");
    assert_eq!(settle(&client, "{a}", "t1", true).await, 1);
    assert_eq!(heard(&mut messages).await, None);

    // A duplicate was told "in flight": the completion publishes.
    assert_eq!(claim_as(&client, "{b}", "t1").await, "A");
    assert_eq!(claim_as(&client, "{b}", "t2").await, "I");
    assert_eq!(settle(&client, "{b}", "t1", true).await, 1);
    assert_eq!(heard(&mut messages).await.as_deref(), Some("{b}:done"));

    // The same for a release; and the record's successor starts unmarked.
    assert_eq!(claim_as(&client, "{c}", "t1").await, "A");
    assert_eq!(settle(&client, "{c}", "t1", false).await, 1);
    assert_eq!(heard(&mut messages).await, None);
    assert_eq!(claim_as(&client, "{c}", "t2").await, "A");
    assert_eq!(claim_as(&client, "{c}", "t3").await, "I");
    assert_eq!(settle(&client, "{c}", "t2", false).await, 1);
    assert_eq!(heard(&mut messages).await.as_deref(), Some("{c}:done"));
    assert_eq!(claim_as(&client, "{c}", "t4").await, "A");
    assert_eq!(settle(&client, "{c}", "t4", true).await, 1);
    assert_eq!(heard(&mut messages).await, None);
    let _ = subscriber.quit().await;
}
