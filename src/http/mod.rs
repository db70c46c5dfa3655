//! The HTTP edge: the two routers (proxied traffic, admin), the shared state, and
//! problem+json rendering of every gateway-made error.

pub mod admin;
pub mod admin_keys;
pub mod gateway;
pub mod ready_probe;

use std::sync::Arc;

use axum::routing::get;
use axum::Router;

use crate::app::App;

/// State shared by every handler.
#[derive(Clone)]
pub struct AppState(pub Arc<App>);

/// Router of the proxy listener: every path and method goes to the gateway.
pub fn proxy_router(app: Arc<App>) -> Router {
    Router::new()
        .fallback(gateway::handle)
        .with_state(AppState(app))
}

/// Router of the admin listener; `/admin/keys` only when `admin.token` is set.
pub fn admin_router(app: Arc<App>) -> Router {
    let mut router = Router::new()
        .route("/healthz", get(admin::healthz))
        .route("/readyz", get(admin::readyz))
        .route("/metrics", get(admin::metrics));
    if app.config.admin.token.is_some() {
        router = router.route(
            "/admin/keys/{route}/{key}",
            get(admin_keys::show).delete(admin_keys::invalidate),
        );
    }
    router.with_state(AppState(app))
}
