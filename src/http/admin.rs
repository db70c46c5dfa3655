//! The admin listener's endpoints: liveness (`/healthz`) and readiness (`/readyz`).

use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use http::StatusCode;
use serde_json::json;

use super::AppState;

/// 200 while the process runs.
pub async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}

/// 200 when Redis answers a `PING`, else 503 naming what is down.
pub async fn readyz(State(AppState(app)): State<AppState>) -> Response {
    let deadline = app.config.redis.command_timeout.min(Duration::from_secs(2));
    let redis = match tokio::time::timeout(deadline, app.redis.ping()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer to PING in time".to_string()),
    };
    match redis {
        Ok(()) => Json(json!({"status": "ready", "dependencies": {"redis": {"state": "up"}}}))
            .into_response(),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({
                "status": "unavailable",
                "down": ["redis"],
                "dependencies": {"redis": {"state": "down", "error": error}},
            })),
        )
            .into_response(),
    }
}
