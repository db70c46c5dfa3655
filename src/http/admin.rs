//! The admin listener's endpoints: liveness (`/healthz`) and readiness (`/readyz`).

use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use http::StatusCode;
use serde_json::{json, Value};

use super::AppState;
use crate::config::OnRedisUnavailable;
use crate::store::tiers::{ClaimPath, Health};

/// 200 while the process runs.
pub async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

/// Prometheus text exposition of every metric.
pub async fn metrics(State(AppState(app)): State<AppState>) -> Response {
    crate::metrics::queue_depth(app.stores.queue_depth());
    crate::metrics::log_lines_dropped(crate::telemetry::dropped_lines());
    (
        [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
        .into_response()
}

/// Configuration an operator should change; each also logged once at start.
fn warnings(app: &crate::App) -> Vec<&'static str> {
    let mut warnings = Vec::new();
    if app.scope_keys.current.is_none() {
        warnings.push(
            "no idempotency.scope_secret_file: scope and record ids are unkeyed hashes \
             that can be brute-forced back to short tenant credentials",
        );
    }
    warnings
}

/// Each dependency and its state; 503 when keyed requests cannot be served under the
/// configured `on_redis_unavailable` policy.
///
/// Postgres being down does not make a replica unready (the body says `postgres` is
/// down, and `idemgate_postgres_up` is 0: the signal to alert on). Every replica
/// shares one Postgres, so failing readiness would pull them all out of the load
/// balancer at once: clients would get connection errors instead of the 503s with
/// `Retry-After` that keyed requests answer meanwhile, and replays still served from
/// Redis would stop too.
pub async fn readyz(State(AppState(app)): State<AppState>) -> Response {
    let deadline = app.config.redis.command_timeout.min(Duration::from_secs(2));
    let stores = &app.stores;
    let (redis_health, pg_health) = stores.health(deadline).await;
    let redis_up = redis_health == Health::Up;
    let redis = health_json(redis_health);
    let (postgres, postgres_up) = match pg_health {
        None => (
            json!({"state": "not_configured", "mode": "redis_only"}),
            false,
        ),
        Some((health, queue)) => {
            let mut s = health_json(health);
            s["write_through_queue"] = json!(queue);
            (s, health == Health::Up)
        }
    };
    let ready = redis_up
        || match app.config.idempotency.on_redis_unavailable {
            OnRedisUnavailable::Postgres => postgres_up,
            OnRedisUnavailable::PassThrough => true,
            OnRedisUnavailable::Reject => false,
        };
    let down: Vec<&str> = [
        ("redis", redis_up),
        ("postgres", postgres_up || pg_health.is_none()),
    ]
    .into_iter()
    .filter(|(_, up)| !up)
    .map(|(name, _)| name)
    .collect();
    let body = json!({
        "status": if ready { "ready" } else { "unavailable" },
        "down": down,
        "claims_in": if stores.claims_in_redis() { "redis" } else { "postgres_or_policy" },
        "claim_path": claim_path(stores.claim_path()),
        "dependencies": {"redis": redis, "postgres": postgres},
        "scope_ids": if app.scope_keys.current.is_some() { "keyed" } else { "unkeyed" },
        "warnings": warnings(&app),
    });
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// Where claims are kept now: the mode, and with vouched claims each shard's path
/// (`kept_by_redis`, or `written_through` and why, as `idemgate_claim_vouch_total`
/// names it).
fn claim_path(path: ClaimPath) -> Value {
    match path {
        ClaimPath::RedisOnly => json!({"mode": "redis_only"}),
        ClaimPath::Redis => json!({"mode": "redis"}),
        ClaimPath::WriteThrough => json!({"mode": "write_through"}),
        ClaimPath::Vouched(shards) => {
            let shards: Vec<Value> = (shards.into_iter())
                .map(|(shard, why)| match why {
                    None => json!({"shard": shard, "claims": "kept_by_redis"}),
                    Some(why) => json!({"shard": shard, "claims": "written_through", "why": why}),
                })
                .collect();
            json!({"mode": "vouched", "shards": shards})
        }
    }
}

/// A dependency's health as `/readyz` shows it to anyone who reaches the admin port:
/// a generic text (the store logged the detail).
fn health_json(health: Health) -> Value {
    match health {
        Health::Up => json!({"state": "up"}),
        Health::Down => {
            json!({"state": "down", "error": "not answering (details in the gateway log)"})
        }
        Health::Silent => json!({"state": "down", "error": "no answer in time"}),
    }
}
