//! Metrics after real traffic of every outcome (and `promtool check metrics`),
//! request ids, readiness JSON, and the admin API.

use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::{config, durable_stack, read, replays_within, stack};
use crate::support::{MockUpstream, RedisServer, TestApp};

/// Samples of `idemgate_requests_total` for `route`, by outcome.
fn outcomes(text: &str, route: &str) -> HashMap<String, f64> {
    let prefix = "idemgate_requests_total{";
    text.lines()
        .filter(|l| l.starts_with(prefix) && l.contains(&format!("route=\"{route}\"")))
        .filter_map(|l| {
            let outcome = l.split("outcome=\"").nth(1)?.split('"').next()?.to_string();
            let value = l.rsplit(' ').next()?.parse().ok()?;
            Some((outcome, value))
        })
        .collect()
}

async fn scrape(app: &TestApp) -> String {
    app.metrics().await
}

/// A gateway whose only route is named `route`, with `extra` TOML.
async fn named(redis: &RedisServer, upstream: &MockUpstream, route: &str, extra: &str) -> TestApp {
    let mut cfg = config(&redis.url(), &upstream.url(), extra);
    cfg.routes[0].name = route.into();
    TestApp::spawn(cfg).await
}

#[tokio::test]
async fn every_outcome_moves_its_counter_and_promtool_accepts_the_output() {
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let app = named(
        &redis,
        &upstream,
        "obs",
        "[server]\nmax_request_body = \"1KiB\"\n",
    )
    .await;
    app.post("e", "{}").send().await.unwrap(); // executed
    app.post("e", "{}").send().await.unwrap(); // replayed
    app.post("e", "{\"other\":1}").send().await.unwrap(); // mismatch
    app.post("a b", "{}").send().await.unwrap(); // invalid_key
    app.post("big", &"x".repeat(2048)).send().await.unwrap(); // rejected
    upstream.push_statuses(&[503]);
    app.post("u", "{}").send().await.unwrap(); // upstream_error
    upstream.set_delay(Duration::from_millis(500));
    let slow = tokio::spawn(app.post("slow", "{}").send());
    upstream.until_executions(3).await;
    app.post("slow", "{}").send().await.unwrap(); // in_flight
    slow.await.unwrap().unwrap();
    upstream.set_delay(Duration::ZERO);

    let required = named(
        &redis,
        &upstream,
        "obs_req",
        "[idempotency]\nrequired = true\n",
    )
    .await;
    required
        .client
        .post(required.url("/v1/x"))
        .send()
        .await
        .unwrap(); // missing_key

    let mut down = RedisServer::start();
    let reject = named(
        &down,
        &upstream,
        "obs_down",
        "[idempotency]\non_redis_unavailable = \"reject\"\n",
    )
    .await;
    let bypass = named(
        &down,
        &upstream,
        "obs_bypass",
        "[idempotency]\non_redis_unavailable = \"pass_through\"\n",
    )
    .await;
    down.stop();
    reject.post("s", "{}").send().await.unwrap(); // store_unavailable
    bypass.post("b", "{}").send().await.unwrap(); // bypassed

    let text = scrape(&app).await;
    let obs = outcomes(&text, "obs");
    for outcome in [
        "executed",
        "replayed",
        "mismatch",
        "invalid_key",
        "rejected",
        "upstream_error",
        "in_flight",
    ] {
        assert!(
            obs.get(outcome).copied().unwrap_or(0.0) >= 1.0,
            "{outcome} not counted: {obs:?}"
        );
    }
    assert_eq!(obs["executed"], 2.0, "one for `e`, one for `slow`");
    assert_eq!(outcomes(&text, "obs_req")["missing_key"], 1.0);
    assert_eq!(outcomes(&text, "obs_down")["store_unavailable"], 1.0);
    assert_eq!(outcomes(&text, "obs_bypass")["bypassed"], 1.0);
    for name in [
        "idemgate_request_duration_seconds_bucket{",
        "idemgate_upstream_duration_seconds_bucket{",
        "idemgate_redis_duration_seconds_bucket{op=\"claim\"",
        "idemgate_redis_duration_seconds_bucket{op=\"complete\"",
        "idemgate_stored_response_bytes_bucket",
        "idemgate_fallback_total{reason=\"pass_through\"}",
        "idemgate_in_flight",
        "idemgate_redis_up",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics");
    }
    assert!(
        !text.contains("\"e\"") && !text.contains("slow\""),
        "keys must never be labels"
    );

    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; `make test` installs it)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn postgres_metrics_cover_write_through_and_fallbacks() {
    let (mut redis, _pg, _upstream, app) = durable_stack("claims = \"redis\"", "").await;
    app.post("m1", "{}").send().await.unwrap();
    redis.restart();
    assert!(replays_within(&app, "m1", "{}", Duration::from_secs(5)).await);
    let text = scrape(&app).await;
    for name in [
        "idemgate_postgres_duration_seconds_bucket{op=\"write_through\"",
        "idemgate_postgres_duration_seconds_bucket{op=\"lookup\"",
        "idemgate_fallback_total{reason=\"cold_lookup_hit\"}",
        "idemgate_write_through_queue_depth",
    ] {
        assert!(text.contains(name), "{name} missing from /metrics");
    }
}

#[tokio::test]
async fn request_ids_are_kept_or_made_and_forwarded() {
    let (_redis, upstream, app) = stack("").await;
    let r = app
        .post("rid", "{}")
        .header("X-Request-Id", "abc-123")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-request-id"], "abc-123");
    assert_eq!(upstream.seen()[0].headers["x-request-id"], "abc-123");
    let r = app.post("rid2", "{}").send().await.unwrap();
    let made = r.headers()["x-request-id"].to_str().unwrap().to_string();
    assert_eq!(made.len(), 32, "a fresh id: {made}");
    assert_eq!(upstream.seen()[1].headers["x-request-id"], made.as_str());
}

#[tokio::test]
async fn readyz_names_each_dependency() {
    let (_redis, mut pg, _upstream, app) = durable_stack("", "").await;
    let url = format!("http://{}/readyz", app.admin);
    let v: serde_json::Value = app
        .client
        .get(&url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["dependencies"]["redis"]["state"], "up");
    assert_eq!(v["dependencies"]["postgres"]["state"], "up");
    pg.stop();
    let r = app.client.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200, "redis alone can serve keyed requests");
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["dependencies"]["postgres"]["state"], "down");
    assert_eq!(v["down"], serde_json::json!(["postgres"]));
}

const TOKEN: &str = "test-admin-token-0123456789";

#[tokio::test]
async fn admin_api_shows_invalidates_and_refuses_while_leased() {
    let (_redis, _pg, upstream, app) =
        durable_stack("", &format!("[admin]\ntoken = \"{TOKEN}\"\n")).await;
    let admin = |path: &str| format!("http://{}/admin/keys/payments/{path}", app.admin);
    let bearer = format!("Bearer {TOKEN}");

    let r = app.client.get(admin("k1")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = app
        .client
        .get(admin("k1"))
        .header("Authorization", "Bearer wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    app.post("k1", "{}")
        .header("Authorization", "Bearer tenant-a")
        .send()
        .await
        .unwrap();
    // The tenant travels in a header (never the query string, which access logs keep).
    let show_for = |tenant: &'static str| {
        app.client
            .get(admin("k1"))
            .header("Authorization", &bearer)
            .header("Idemgate-Scope-Authorization", tenant)
            .send()
    };
    let show = |q: String| {
        app.client
            .get(admin(&format!("k1?{q}")))
            .header("Authorization", &bearer)
            .send()
    };
    let v: serde_json::Value = show_for("Bearer tenant-a")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["redis"]["state"], "completed", "{v}");
    assert_eq!(v["postgres"]["state"], "completed", "{v}");
    assert_eq!(v["postgres"]["status"], 201);
    let by_hash: serde_json::Value =
        show(format!("scope_hash={}", v["scope_hash"].as_str().unwrap()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
    assert_eq!(by_hash["redis"]["state"], "completed");
    let other: serde_json::Value = show_for("someone-else")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(other["redis"]["state"], "absent", "tenants are separate");

    // In flight: refused unless forced.
    upstream.set_delay(Duration::from_millis(800));
    let slow = tokio::spawn(app.post("k2", "{}").send());
    upstream.until_executions(2).await;
    let v: serde_json::Value = app
        .client
        .get(admin("k2"))
        .header("Authorization", &bearer)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["redis"]["state"], "in_flight");
    assert!(v["redis"]["lease_remaining_ms"].as_i64().unwrap() > 0);
    let r = app
        .client
        .delete(admin("k2"))
        .header("Authorization", &bearer)
        .send()
        .await
        .unwrap();
    let (status, headers, body) = read(r).await;
    assert_eq!(status, 409);
    assert_eq!(
        crate::support::problem_code(&headers, &body),
        "record_leased"
    );
    slow.await.unwrap().unwrap();
    upstream.set_delay(Duration::ZERO);

    // Invalidate: gone from both tiers, so the key runs again.
    let r = app
        .client
        .delete(admin("k1"))
        .header("Authorization", &bearer)
        .header("Idemgate-Scope-Authorization", "Bearer tenant-a")
        .send()
        .await
        .unwrap();
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        v["deleted"],
        serde_json::json!({"redis": true, "postgres": true})
    );
    let again = app
        .post("k1", "{}")
        .header("Authorization", "Bearer tenant-a")
        .send()
        .await
        .unwrap();
    assert_eq!(again.headers()["idempotent-replayed"], "false");
    assert_eq!(upstream.executions(), 3);

    // Forced delete of a leased key.
    upstream.set_delay(Duration::from_millis(600));
    let slow = tokio::spawn(app.post("k3", "{}").send());
    upstream.until_executions(4).await;
    let r = app
        .client
        .delete(admin("k3?force=true"))
        .header("Authorization", &bearer)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    slow.await.unwrap().unwrap();
}

#[tokio::test]
async fn admin_api_is_off_without_a_token() {
    let (_redis, _upstream, app) = stack("").await;
    let r = app
        .client
        .get(format!("http://{}/admin/keys/payments/k", app.admin))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}
