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
    let app = outcomes_of_one_route(&redis, &upstream).await;
    missing_key_on_a_route_that_requires_one(&redis, &upstream).await;
    redis_down_rejected_and_bypassed(&upstream).await;
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
    metrics_are_named_and_keys_never_labels(&text);
    promtool_accepts(&text);
}

/// Route `obs`: executed, replayed, mismatch, invalid_key, rejected (a body over
/// 1 KiB), upstream_error and in_flight, each at least once.
async fn outcomes_of_one_route(redis: &RedisServer, upstream: &MockUpstream) -> TestApp {
    let app = named(
        redis,
        upstream,
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
    app
}

/// Route `obs_req` (`required = true`): a request without a key.
async fn missing_key_on_a_route_that_requires_one(redis: &RedisServer, upstream: &MockUpstream) {
    let required = named(
        redis,
        upstream,
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
}

/// Routes `obs_down` (reject) and `obs_bypass` (pass through) with their Redis stopped.
async fn redis_down_rejected_and_bypassed(upstream: &MockUpstream) {
    let mut down = RedisServer::start();
    let reject = named(
        &down,
        upstream,
        "obs_down",
        "[idempotency]\non_redis_unavailable = \"reject\"\n",
    )
    .await;
    let bypass = named(
        &down,
        upstream,
        "obs_bypass",
        "[idempotency]\non_redis_unavailable = \"pass_through\"\n",
    )
    .await;
    down.stop();
    reject.post("s", "{}").send().await.unwrap(); // store_unavailable
    bypass.post("b", "{}").send().await.unwrap(); // bypassed
}

/// The histograms and gauges are exported; no key is ever a label.
fn metrics_are_named_and_keys_never_labels(text: &str) {
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
}

/// `promtool check metrics` accepts the output.
fn promtool_accepts(text: &str) {
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
    // Filled at completion, so that both tiers hold the record it shows and deletes.
    let fill = "redis_fill = \"at_completion\"";
    let (_redis, _pg, upstream, app) =
        durable_stack(fill, &format!("[admin]\ntoken = \"{TOKEN}\"\n")).await;
    let admin = Admin { app: &app };
    admin.refuses_without_the_token().await;
    app.post("k1", "{}")
        .header("Authorization", "Bearer tenant-a")
        .send()
        .await
        .unwrap();
    admin.shows_a_record_to_its_tenant_only().await;
    admin.refuses_to_delete_a_leased_key(&upstream).await;
    admin.invalidates_in_both_tiers(&upstream).await;
    admin.deletes_a_leased_key_when_forced(&upstream).await;
}

/// The admin API of one gateway, asked with the right token.
struct Admin<'a> {
    app: &'a TestApp,
}

impl Admin<'_> {
    fn url(&self, path: &str) -> String {
        format!("http://{}/admin/keys/payments/{path}", self.app.admin)
    }

    /// `GET` of `path` with the token (and the tenant's header when given).
    async fn show(&self, path: &str, tenant: Option<&str>) -> serde_json::Value {
        let mut request = (self.app.client.get(self.url(path)))
            .header("Authorization", format!("Bearer {TOKEN}"));
        if let Some(tenant) = tenant {
            // The tenant travels in a header (never the query string, which access logs keep).
            request = request.header("Idemgate-Scope-Authorization", tenant);
        }
        request.send().await.unwrap().json().await.unwrap()
    }

    /// `DELETE` of `path` with the token (and the tenant's header when given).
    async fn delete(&self, path: &str, tenant: Option<&str>) -> reqwest::Response {
        let mut request = (self.app.client.delete(self.url(path)))
            .header("Authorization", format!("Bearer {TOKEN}"));
        if let Some(tenant) = tenant {
            request = request.header("Idemgate-Scope-Authorization", tenant);
        }
        request.send().await.unwrap()
    }

    /// Without the token, or with a wrong one: 401.
    async fn refuses_without_the_token(&self) {
        let r = self.app.client.get(self.url("k1")).send().await.unwrap();
        assert_eq!(r.status(), 401);
        let r = (self.app.client.get(self.url("k1")))
            .header("Authorization", "Bearer wrong")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
    }

    /// `k1`, completed by tenant-a, in both tiers; by its scope hash too; absent for
    /// another tenant.
    async fn shows_a_record_to_its_tenant_only(&self) {
        let v = self.show("k1", Some("Bearer tenant-a")).await;
        assert_eq!(v["redis"]["state"], "completed", "{v}");
        assert_eq!(v["postgres"]["state"], "completed", "{v}");
        assert_eq!(v["postgres"]["status"], 201);
        let hash = v["scope_hash"].as_str().unwrap();
        let by_hash = self.show(&format!("k1?scope_hash={hash}"), None).await;
        assert_eq!(by_hash["redis"]["state"], "completed");
        let other = self.show("k1", Some("someone-else")).await;
        assert_eq!(other["redis"]["state"], "absent", "tenants are separate");
    }

    /// A key in flight is shown with its lease, and not deleted without `force` (409).
    async fn refuses_to_delete_a_leased_key(&self, upstream: &MockUpstream) {
        upstream.set_delay(Duration::from_millis(800));
        let slow = tokio::spawn(self.app.post("k2", "{}").send());
        upstream.until_executions(2).await;
        let v = self.show("k2", None).await;
        assert_eq!(v["redis"]["state"], "in_flight");
        assert!(v["redis"]["lease_remaining_ms"].as_i64().unwrap() > 0);
        let (status, headers, body) = read(self.delete("k2", None).await).await;
        assert_eq!(status, 409);
        assert_eq!(
            crate::support::problem_code(&headers, &body),
            "record_leased"
        );
        slow.await.unwrap().unwrap();
        upstream.set_delay(Duration::ZERO);
    }

    /// Invalidated, `k1` is gone from both tiers, so the key runs again.
    async fn invalidates_in_both_tiers(&self, upstream: &MockUpstream) {
        let r = self.delete("k1", Some("Bearer tenant-a")).await;
        let v: serde_json::Value = r.json().await.unwrap();
        assert_eq!(
            v["deleted"],
            serde_json::json!({"redis": true, "postgres": true})
        );
        let again = (self.app.post("k1", "{}"))
            .header("Authorization", "Bearer tenant-a")
            .send()
            .await
            .unwrap();
        assert_eq!(again.headers()["idempotent-replayed"], "false");
        assert_eq!(upstream.executions(), 3);
    }

    /// `force=true` deletes a leased key.
    async fn deletes_a_leased_key_when_forced(&self, upstream: &MockUpstream) {
        upstream.set_delay(Duration::from_millis(600));
        let slow = tokio::spawn(self.app.post("k3", "{}").send());
        upstream.until_executions(4).await;
        let r = self.delete("k3?force=true", None).await;
        assert_eq!(r.status(), 200);
        slow.await.unwrap().unwrap();
    }
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
