//! The admin listener's endpoints: liveness (`/healthz`) and readiness (`/readyz`).

use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use http::StatusCode;
use serde_json::{json, Value};

use super::AppState;
use crate::config::OnRedisUnavailable;

/// 200 while the process runs.
pub async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

/// Prometheus text exposition of every metric.
pub async fn metrics(State(AppState(app)): State<AppState>) -> Response {
    let queue = app
        .stores
        .postgres
        .as_ref()
        .map_or(0, |pg| pg.writer.queue_depth());
    crate::metrics::queue_depth(queue);
    crate::metrics::log_lines_dropped(crate::telemetry::dropped_lines());
    (
        [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
        .into_response()
}

/// Each dependency and its state; 503 when keyed requests cannot be served under the
/// configured `on_redis_unavailable` policy.
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

pub async fn readyz(State(AppState(app)): State<AppState>) -> Response {
    let deadline = app.config.redis.command_timeout.min(Duration::from_secs(2));
    let stores = &app.stores;
    let redis_health = Health::of(
        "redis",
        tokio::time::timeout(deadline, stores.redis.ping()).await,
    );
    let redis_up = redis_health == Health::Up;
    let redis = redis_health.to_json();
    let (postgres, postgres_up) = match &stores.postgres {
        None => (
            json!({"state": "not_configured", "mode": "redis_only"}),
            false,
        ),
        Some(pg) => {
            let health = Health::of(
                "postgres",
                tokio::time::timeout(deadline, pg.store.ping()).await,
            );
            let mut s = health.to_json();
            s["write_through_queue"] = json!(pg.writer.queue_depth());
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
        ("postgres", postgres_up || stores.postgres.is_none()),
    ]
    .into_iter()
    .filter(|(_, up)| !up)
    .map(|(name, _)| name)
    .collect();
    let body = json!({
        "status": if ready { "ready" } else { "unavailable" },
        "down": down,
        "claims_in": if stores.breaker.is_open() { "postgres_or_policy" } else { "redis" },
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

/// A dependency's health for `/readyz`, which anyone who reaches the admin port may
/// read: a generic text there, the backend's own error (hosts, users) in the log only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    Up,
    Down,
    Silent,
}

impl Health {
    fn of<E: std::fmt::Display>(
        name: &'static str,
        r: Result<Result<(), E>, tokio::time::error::Elapsed>,
    ) -> Self {
        match r {
            Ok(Ok(())) => Health::Up,
            Ok(Err(e)) => {
                tracing::warn!(dependency = name, error = %e, "readiness check failed");
                Health::Down
            }
            Err(_) => Health::Silent,
        }
    }

    fn to_json(self) -> Value {
        match self {
            Health::Up => json!({"state": "up"}),
            Health::Down => {
                json!({"state": "down", "error": "not answering (details in the gateway log)"})
            }
            Health::Silent => json!({"state": "down", "error": "no answer in time"}),
        }
    }
}
