//! The application: configuration, routes and clients built once at start and shared
//! by every request as [`crate::http::AppState`].

use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::proxy::Upstream;
use crate::route::RouteTable;
use crate::store::RedisStore;

/// Everything a request needs, built once.
pub struct App {
    pub config: Config,
    pub routes: RouteTable,
    pub redis: RedisStore,
    pub upstream: Upstream,
    /// Detached forward-and-record tasks, awaited at shutdown.
    pub tasks: TaskTracker,
}

impl App {
    /// Builds the application from a validated configuration. Redis need not be up.
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        if config.routes.is_empty() {
            tracing::warn!("no [[routes]] configured: every proxied request answers 404");
        }
        let redis = RedisStore::connect(&config.redis).await?;
        Ok(Self {
            routes: RouteTable::new(&config),
            redis,
            upstream: Upstream::new(),
            tasks: TaskTracker::new(),
            config,
        })
    }
}
