//! The application: configuration, routes and store clients built once at start and
//! shared by every request as [`crate::http::AppState`].

use std::sync::{Arc, OnceLock};

use anyhow::Context;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{validate, warnings, Config, InFlightPolicy, PostgresConfig, RedisMode};
use crate::idempotency::{ScopeKeys, ScopeSecret};
use crate::proxy::Upstream;
use crate::route::RouteTable;
use crate::store::memory::ReplayCache;
use crate::store::postgres::claim_rounds::ClaimRounds;
use crate::store::postgres::lookups::Lookups;
use crate::store::postgres::writer::Writer;
use crate::store::redis::waiters::{Channels, Waiters};
use crate::store::tiers::Durable;
use crate::store::{PgStore, RedisStore, Stores};
use crate::tls::listener::ListenerCert;

/// Everything a request needs, built once.
pub struct App {
    pub config: Config,
    pub routes: RouteTable,
    pub stores: Stores,
    pub upstream: Upstream,
    /// Detached forward-and-record tasks, awaited at shutdown.
    pub tasks: TaskTracker,
    /// Cancels the upstream calls still running near the end of
    /// `server.shutdown_grace`, so that each settles its key (`on_ambiguous`) before the
    /// process exits instead of leaving its lease to lapse.
    pub calls: CancellationToken,
    /// Renders `/metrics`.
    pub metrics: PrometheusHandle,
    /// How scope and record ids are derived (the scope secret, if any).
    pub scope_keys: ScopeKeys,
    /// The proxy listener's certificate, with `[server.tls]`.
    pub(crate) listener_cert: Option<Arc<ListenerCert>>,
}

impl App {
    /// Builds the application: checks the configuration's cross-field rules
    /// ([`validate`], so a `Config` built or changed in code is refused with the key
    /// at fault, not a panic), connects Redis (which need not be up), prepares Postgres
    /// (migrating it unless told not to) and starts the background tasks (Redis probe,
    /// write-through, reaper).
    pub async fn build(config: Config) -> anyhow::Result<Self> {
        Self::build_part(config, None).await
    }

    /// Builds worker `part.index` of `server.runtime = "thread_per_core"` from its
    /// share of the configuration ([`crate::config::worker_share`]): its own
    /// connections, waiter subscription and upstream client, the process's replay
    /// cache and Postgres batchers (spawned by worker 0), and the process-wide duties
    /// (metrics upkeep, reaper) on worker 0 only.
    pub async fn build_worker(config: Config, part: WorkerPart) -> anyhow::Result<Self> {
        Self::build_part(config, Some(part)).await
    }

    /// The steps of [`App::build`], in order.
    async fn build_part(mut config: Config, part: Option<WorkerPart>) -> anyhow::Result<Self> {
        let first = part.as_ref().map_or(true, |p| p.index == 0);
        validate(&config)?;
        crate::config::admin_token(&mut config.admin)?;
        let listener_cert = match &part {
            Some(part) => part.listener_cert.clone(),
            None => ListenerCert::load(&config.server.tls)?,
        };
        for warning in warnings(&config) {
            tracing::warn!("{warning}");
        }
        let scope_keys = scope_keys(&config).await?;
        let upstream = Upstream::new(&config.routes)?;
        let metrics = start_metrics(first);
        let redis = connect_redis(&config).await?;
        let postgres = match &config.postgres {
            Some(pg) => Some(prepare_postgres(pg, part.as_ref()).await?),
            None => None,
        };
        let cache = match part {
            Some(part) => part.cache,
            None => replay_cache(&config),
        };
        let waiters = start_waiters(&config, &redis, &cache)?;
        let stores = Stores::new(&config, redis, postgres, waiters, cache);
        start_background(&stores, &config, first).await;
        Ok(Self {
            routes: RouteTable::new(&config),
            stores,
            upstream,
            tasks: TaskTracker::new(),
            calls: CancellationToken::new(),
            metrics,
            scope_keys,
            listener_cert,
            config,
        })
    }
}

/// Installs the metrics recorder; the first worker also keeps it (upkeep).
fn start_metrics(first: bool) -> PrometheusHandle {
    let metrics = crate::metrics::install();
    if first {
        crate::metrics::spawn_upkeep(metrics.clone());
    }
    metrics
}

/// Connects Redis (which need not be up), then warns about what the server says of
/// itself: an eviction policy that may evict leases, a cluster that stops every
/// shard while one is down.
async fn connect_redis(config: &Config) -> anyhow::Result<RedisStore> {
    let redis = RedisStore::connect_with(
        &config.redis,
        config.epoch_quarantine(),
        (config.vouched_claims()).then(|| config.longest_ttl()),
    )
    .await?;
    match redis.maxmemory_policy().await {
        Ok(policy) if policy != "noeviction" => tracing::warn!(
            policy,
            "redis maxmemory-policy is not noeviction: redis may evict leases and stored \
             responses under memory pressure"
        ),
        _ => {}
    }
    if config.redis.mode == RedisMode::Cluster
        && matches!(redis.cluster_requires_full_coverage().await, Ok(true))
    {
        tracing::warn!(
            "redis cluster-require-full-coverage is yes: while one primary is unreachable \
             (a crash, a network partition) every node refuses every key until the \
             failover, so keys of healthy shards answer 503 (or move to postgres); set \
             it to no so that the other shards keep serving"
        );
    }
    Ok(redis)
}

/// Prepares Postgres (migrates it, or checks its schema with
/// `postgres.migrate_on_start = false`) and its batchers.
async fn prepare_postgres(
    pg: &PostgresConfig,
    part: Option<&WorkerPart>,
) -> anyhow::Result<Durable> {
    let store = PgStore::new(pg)?;
    let prepared = if pg.migrate_on_start {
        (store.migrate().await.map(drop)).context("migrating postgres (postgres.url)")
    } else {
        (store.check_schema().await).context("checking the postgres schema")
    };
    prepared.map_err(|e| crate::tls::postgres::explain(e, pg))?;
    let spawn = || Batchers {
        writer: Writer::spawn(
            store.clone(),
            pg.batch_max,
            pg.retry_queue,
            pg.retry_queue_bytes.as_u64(),
        ),
        lookups: Lookups::spawn(store.clone(), pg.batch_max),
        claims: ClaimRounds::spawn(store.clone(), pg.batch_max),
    };
    // Spawned on the runtime of the first worker that gets here (worker 0).
    let Batchers {
        writer,
        lookups,
        claims,
    } = match part {
        Some(part) => part.batchers.get_or_init(spawn).clone(),
        None => spawn(),
    };
    Ok(Durable {
        store,
        writer,
        lookups,
        claims,
        durability: pg.claims,
        redis_fill: pg.redis_fill(),
    })
}

/// The replay cache of a process (`None`: off).
fn replay_cache(config: &Config) -> Option<Arc<ReplayCache>> {
    let rc = &config.replay_cache;
    ReplayCache::new(rc.max_bytes.as_u64(), rc.max_age).map(Arc::new)
}

/// Starts the waiters (the Redis subscription that wakes waiting duplicates and
/// clears the replay cache) when a route waits for in-flight duplicates or the cache
/// is on.
fn start_waiters(
    config: &Config,
    redis: &RedisStore,
    cache: &Option<Arc<ReplayCache>>,
) -> anyhow::Result<Option<Arc<Waiters>>> {
    let waiting = (config.routes.iter())
        .map(|r| r.idempotency.apply(&config.idempotency).in_flight)
        .any(|p| p == InFlightPolicy::Wait);
    if !waiting && cache.is_none() {
        return Ok(None);
    }
    let channels = Channels {
        pattern: redis.channel_pattern(),
        invalidations: redis.invalidation_channel(),
        sharded: redis.sharded_pubsub(),
    };
    let waiters = Waiters::start(&config.redis, channels, cache.clone())?;
    Ok(Some(waiters))
}

/// Probes the stores once, then starts their background tasks: the Redis probe,
/// and on the first worker the reaper.
async fn start_background(stores: &Stores, config: &Config, first: bool) {
    // What each primary runs first: the epoch markers are written only where one can
    // keep a claim alone.
    stores.probe_vouching().await;
    stores
        .write_epochs(
            config
                .redis
                .connect_timeout
                .max(std::time::Duration::from_secs(5)),
        )
        .await;
    stores.probe().await;
    let reap = (config.postgres.as_ref())
        .filter(|_| first)
        .map(|p| (p.reap_interval, p.reap_batch));
    stores.spawn_background(config.redis.probe_interval, reap);
}

/// What a worker of `server.runtime = "thread_per_core"` is given by the process.
pub struct WorkerPart {
    /// 0 for the worker that also reaps and keeps the metrics.
    pub index: usize,
    /// The replay cache every worker shares (`None`: off).
    pub cache: Option<Arc<ReplayCache>>,
    /// The Postgres batchers every worker shares: set by the first worker that builds
    /// them (worker 0, whose runtime runs their tasks), cloned by the others.
    pub batchers: Arc<OnceLock<Batchers>>,
    /// The proxy listener's certificate (`[server.tls]`), loaded once for every worker.
    pub listener_cert: Option<Arc<ListenerCert>>,
}

/// The write-through, lookup and claim batchers of a process. Shared by the
/// `thread_per_core` workers so their records, lookups and claims share statements as in `multi_thread` (half
/// as many statements with 2 workers); a batch costs a worker one cross-thread
/// wake-up to send and one to be answered, not one per request.
#[derive(Clone)]
pub struct Batchers {
    writer: Writer,
    lookups: Lookups,
    claims: ClaimRounds,
}

/// Reads `idempotency.scope_secret_file` (unkeyed ids without one).
async fn scope_keys(config: &Config) -> anyhow::Result<ScopeKeys> {
    let c = &config.idempotency;
    let Some(path) = &c.scope_secret_file else {
        // Warned about with the other configuration warnings.
        return Ok(ScopeKeys::default());
    };
    let bytes = tokio::fs::read(path)
        .await
        .with_context(|| format!("reading idempotency.scope_secret_file {}", path.display()))?;
    let secret = ScopeSecret::from_file_contents(&bytes)
        .map_err(|e| anyhow::anyhow!("idempotency.scope_secret_file {}: {e}", path.display()))?;
    Ok(ScopeKeys {
        current: Some(secret),
        previous: c.lookup_unkeyed_ids.then_some(None),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A configuration changed in code after loading is checked, not trusted: the
    /// error names the key, before anything is connected.
    #[tokio::test]
    async fn build_refuses_an_unchecked_config() {
        let mut config = Config::from_toml(
            "[[routes]]\nname = \"a\"\npath_prefix = \"/\"\nupstream = \"http://127.0.0.1:1\"\n",
        )
        .unwrap();
        config.redis.command_timeout = Duration::from_secs(20);
        let Err(e) = App::build(config).await else {
            panic!("an invalid config was accepted");
        };
        assert!(
            e.to_string().contains("routes[0].idempotency.lock_ttl"),
            "{e}"
        );

        let mut config = Config::default();
        config.idempotency.scope_headers.clear();
        let Err(e) = App::build(config).await else {
            panic!("an invalid config was accepted");
        };
        assert!(e.to_string().contains("idempotency.scope_headers"), "{e}");
    }
}
