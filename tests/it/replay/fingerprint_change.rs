//! Changing a route's fingerprint policy: records stored before the change keep
//! replaying for retries that match them under the rules they were stored by
//! (`fingerprint_previous`, by default the default policy), from Redis and from
//! Postgres; a retry that matches under neither policy still gets 422; new records
//! follow the new policy. Two gateways on one Redis and one Postgres, one before the
//! change and one after, as during a rolling deploy.

use crate::support::{config, problem_code, send, MockUpstream, PgServer, RedisServer, TestApp};

#[tokio::test]
async fn records_stored_before_a_policy_change_keep_replaying_under_the_old_rules() {
    let redis = RedisServer::start();
    let pg = PgServer::start();
    let upstream = MockUpstream::start().await;
    let gateway = |extra: &str| {
        let toml = format!("{}{extra}", pg.section(""));
        TestApp::spawn(config(&redis.url(), &upstream.url(), &toml))
    };
    let before = gateway("").await;
    let after = gateway("[idempotency.fingerprint]\nignore_json = [\"/client_ts\"]\n").await;

    // Stored under the default policy; retried after the change (Redis holds it).
    let first = send(before.post("k1", r#"{"amount":1,"client_ts":1}"#)).await;
    assert_eq!(first.0, 201);
    let retry = send(after.post("k1", r#"{"amount":1,"client_ts":1}"#)).await;
    assert_eq!(retry.1["idempotent-replayed"], "true", "{:?}", retry.2);
    assert_eq!(retry.2, first.2);
    // Under neither policy the same request: refused, as before the change.
    let other = send(after.post("k1", r#"{"amount":2,"client_ts":1}"#)).await;
    assert_eq!(problem_code(&other.1, &other.2), "idempotency_key_reused");
    // The old rules did not ignore client_ts: a retry that differs there is no retry of it.
    let moved = send(after.post("k1", r#"{"amount":1,"client_ts":2}"#)).await;
    assert_eq!(problem_code(&moved.1, &moved.2), "idempotency_key_reused");
    assert_eq!(upstream.executions(), 1);

    // The same through Postgres: stored before, Redis emptied, retried after.
    let first = send(before.post("k2", r#"{"amount":5,"client_ts":1}"#)).await;
    redis.cli(&["FLUSHALL"]);
    let retry = send(after.post("k2", r#"{"amount":5,"client_ts":1}"#)).await;
    assert_eq!(retry.1["idempotent-replayed"], "true", "{:?}", retry.2);
    assert_eq!(retry.2, first.2);
    assert_eq!(upstream.executions(), 2);

    // New records follow the new policy: the ignored field does not matter.
    let new = send(after.post("k3", r#"{"amount":9,"client_ts":1}"#)).await;
    let again = send(after.post("k3", r#"{"amount":9,"client_ts":7}"#)).await;
    assert_eq!(again.1["idempotent-replayed"], "true");
    assert_eq!(again.2, new.2);
    assert_eq!(upstream.executions(), 3);
}

#[tokio::test]
async fn without_the_previous_policy_a_changed_fingerprint_is_a_mismatch() {
    // The control: `fingerprint_previous` set to the new policy itself (no previous
    // rules) turns the retry of the old record into 422, so the test above can fail.
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let before = TestApp::spawn(config(&redis.url(), &upstream.url(), "")).await;
    let policy = "ignore_json = [\"/client_ts\"]\n";
    let extra =
        format!("[idempotency.fingerprint]\n{policy}[idempotency.fingerprint_previous]\n{policy}");
    let after = TestApp::spawn(config(&redis.url(), &upstream.url(), &extra)).await;
    let first = send(before.post("k1", r#"{"amount":1,"client_ts":1}"#)).await;
    assert_eq!(first.0, 201);
    let retry = send(after.post("k1", r#"{"amount":1,"client_ts":1}"#)).await;
    assert_eq!(problem_code(&retry.1, &retry.2), "idempotency_key_reused");
    assert_eq!(upstream.executions(), 1);
}

#[tokio::test]
async fn a_request_unlike_a_record_under_both_policies_never_matches_it() {
    // Stored under the current policy (client_ts ignored); the next request differs from
    // it under both policies, but its hash under the previous one (ts ignored) would be
    // the stored hash if policies were not part of the hash.
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let extra = "[idempotency.fingerprint]\nignore_json = [\"/client_ts\"]\n\
                 [idempotency.fingerprint_previous]\nignore_json = [\"/ts\"]\n";
    let app = TestApp::spawn(config(&redis.url(), &upstream.url(), extra)).await;
    let first = send(app.post("k1", r#"{"amount":1,"client_ts":9}"#)).await;
    assert_eq!(first.0, 201);
    let other = send(app.post("k1", r#"{"amount":1,"ts":3}"#)).await;
    assert_eq!(
        problem_code(&other.1, &other.2),
        "idempotency_key_reused",
        "{:?}",
        other.2
    );
    assert_eq!(upstream.executions(), 1);
}
