//! What a replay repeats (`replay_omit_headers`: per-exchange headers reach the first
//! client only) and which answers release the key (`release_statuses` with classes).

use reqwest::header::HeaderMap;

use crate::support::{comparable, config, read, stack, MockUpstream, RedisServer, TestApp};

/// Headers the mock upstream adds with a value per execution: three the defaults
/// omit, one they do not.
const EXCHANGE: [&str; 4] = [
    "X-RateLimit-Remaining",
    "ratelimit-policy",
    "server-timing",
    "x-cost",
];

/// The `Idempotent-Replayed` value.
fn replayed(h: &HeaderMap) -> &str {
    h["idempotent-replayed"].to_str().unwrap()
}

/// `h` without the headers named.
fn without(h: &HeaderMap, names: &[&str]) -> Vec<(String, Vec<u8>)> {
    (comparable(h).into_iter())
        .filter(|(n, _)| !names.contains(&n.as_str()))
        .collect()
}

#[tokio::test]
async fn omitted_headers_reach_the_first_client_and_are_not_replayed() {
    let (redis, upstream, app) = stack("").await;
    upstream.set_exchange_headers(&EXCHANGE);
    let (s1, h1, b1) = read(app.post("limits", "{\"a\":1}").send().await.unwrap()).await;
    assert_eq!((s1, replayed(&h1)), (201, "false"));
    for name in [
        "x-ratelimit-remaining",
        "ratelimit-policy",
        "server-timing",
        "x-cost",
    ] {
        assert_eq!(h1[name], "execution=1", "the first client gets {name}");
    }
    let omitted = ["x-ratelimit-remaining", "ratelimit-policy", "server-timing"];
    for _ in 0..2 {
        let (s2, h2, b2) = read(app.post("limits", "{\"a\":1}").send().await.unwrap()).await;
        assert_eq!((s2, replayed(&h2)), (201, "true"));
        for name in omitted {
            assert!(h2.get(name).is_none(), "{name} replayed: {h2:?}");
        }
        assert_eq!(
            h2["x-cost"], "execution=1",
            "a header not listed is replayed"
        );
        assert_eq!(
            comparable(&h2),
            without(&h1, &omitted),
            "otherwise byte-identical"
        );
        assert_eq!(b2, b1);
    }
    // Never stored: a gateway that omits nothing replays the record without them too.
    let keep_all = "[idempotency]\nreplay_omit_headers = []\n";
    let other = TestApp::spawn(config(&redis.url(), &upstream.url(), keep_all)).await;
    let (_, h3, _) = read(other.post("limits", "{\"a\":1}").send().await.unwrap()).await;
    assert_eq!(replayed(&h3), "true");
    assert_eq!(comparable(&h3), without(&h1, &omitted), "not in the record");
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn a_route_sets_its_own_patterns_beside_the_cookie_rule() {
    let (_redis, upstream, app) = stack(
        "[idempotency]\nreplay_set_cookie = false\n\
         [routes.idempotency]\nreplay_omit_headers = [\"X-Cost*\"]\n",
    )
    .await;
    upstream.set_exchange_headers(&EXCHANGE);
    let (_, h1, b1) = read(app.post("own", "{}").send().await.unwrap()).await;
    assert_eq!(
        (
            h1["x-cost"].to_str().unwrap(),
            h1.get_all("set-cookie").iter().count()
        ),
        ("execution=1", 2)
    );
    let (s2, h2, b2) = read(app.post("own", "{}").send().await.unwrap()).await;
    assert_eq!((s2, replayed(&h2)), (201, "true"));
    assert!(
        h2.get("x-cost").is_none() && h2.get("set-cookie").is_none(),
        "{h2:?}"
    );
    // The route's list replaces the defaults: the rate-limit headers are replayed.
    assert_eq!(h2["server-timing"], "execution=1");
    assert_eq!(comparable(&h2), without(&h1, &["x-cost", "set-cookie"]));
    assert_eq!(b2, b1);
    assert_eq!(upstream.executions(), 1);
}

/// A record stored while a header was not omitted replays without it once the policy
/// omits it (as `Set-Cookie` always did): replays never repeat what the route omits.
#[tokio::test]
async fn records_stored_before_a_header_was_omitted_replay_without_it() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    upstream.set_exchange_headers(&EXCHANGE);
    let keep_all = "[idempotency]\nreplay_omit_headers = []\n";
    let before = TestApp::spawn(config(&redis.url(), &upstream.url(), keep_all)).await;
    let (_, h1, b1) = read(before.post("old", "{}").send().await.unwrap()).await;
    let (_, h2, _) = read(before.post("old", "{}").send().await.unwrap()).await;
    assert_eq!(
        h2["server-timing"], "execution=1",
        "stored and replayed at first"
    );
    drop(before);
    let after = TestApp::spawn(config(&redis.url(), &upstream.url(), "")).await;
    let (s3, h3, b3) = read(after.post("old", "{}").send().await.unwrap()).await;
    assert_eq!((s3, replayed(&h3)), (201, "true"));
    let omitted = ["x-ratelimit-remaining", "ratelimit-policy", "server-timing"];
    assert_eq!(comparable(&h3), without(&h1, &omitted));
    assert_eq!(b3, b1);
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn a_status_class_releases_the_key_and_other_answers_are_stored() {
    let (redis, upstream, app) =
        stack("[routes.idempotency]\nrelease_statuses = [\"5xx\"]\n").await;
    upstream.push_statuses(&[507]);
    let (status, headers, _) = read(app.post("full", "{}").send().await.unwrap()).await;
    assert_eq!((status, replayed(&headers)), (507, "false"));
    assert!(redis.records().await.is_empty(), "released, not stored");
    let (status, headers, _) = read(app.post("full", "{}").send().await.unwrap()).await;
    assert_eq!(
        (status, replayed(&headers)),
        (201, "false"),
        "the retry executes again"
    );
    // A 422, and a 429 (released by default, not by this list), are stored.
    upstream.push_statuses(&[422, 429]);
    for key in ["invalid", "limited"] {
        let (first, _, b1) = read(app.post(key, "{}").send().await.unwrap()).await;
        let (again, headers, b2) = read(app.post(key, "{}").send().await.unwrap()).await;
        assert_eq!((again, replayed(&headers)), (first, "true"));
        assert_eq!(b2, b1);
    }
    assert_eq!(upstream.executions(), 4);
}
