//! Postgres as the durable tier: [`PgStore`] (a pool whose sessions carry the statement
//! timeout) and the record table's statements, one concept per file: the rows
//! (`rows`), leases (claim, heartbeat and release: [`leases`]; claims of unknown
//! outcome: `unknown`), the write-through statement (`completions`), lookups
//! ([`lookups`]), the admin API's statements (`admin`), the reaper (`reaper`), the
//! completer's statements on abandoned requests ([`abandoned`]), schema migrations ([`migrate`]) and the plans
//! of `idemgate explain` ([`explain`]). Claims
//! ([`claim_rounds`]), lookups and the write-through [`writer`] share statements between
//! requests through one batcher (`batcher`).
//!
//! Time is always Postgres' `now()`, so replicas with skewed clocks agree on expiry.
//!
//! Every session plans its statements once (`plan_cache_mode = force_generic_plan`, set
//! when it connects, unless the URL's `options` say otherwise): the batched statements
//! take arrays whose length the planner reads when it plans for the values, so under
//! the default (`auto`) it kept planning each round anew (a fifth of Postgres' CPU
//! per first execution), although every statement here finds rows by key or walks an
//! index in order, the same plan whatever the values.
//!
//! Every session carries `statement_timeout` (set when it connects), so Postgres itself
//! ends a statement that runs too long: a statement the client gave up on does not go on
//! to commit later. The client waits a little longer than that (a backstop for a server
//! or network that does not answer at all); a statement whose answer it never got has an
//! unknown outcome, which the claim path resolves by releasing its token ([`leases`]).
//!
//! A server that stops answering (powered off, partitioned: its packets dropped, not
//! refused) is handled as one that refuses: each host of the URL gets the connect
//! timeout for a whole connection attempt, hosts that failed are tried last
//! (`connect`), a session whose statement got no answer is closed rather than pooled
//! (`session`), and the connections made to that server are not handed out again
//! (`servers`).

pub mod abandoned;
mod admin;
mod arrivals;
mod batcher;
pub mod claim_asks;
pub mod claim_rounds;
mod completions;
mod connect;
mod epochs;
pub mod explain;
mod host_config;
pub mod leases;
pub mod lookups;
pub mod migrate;
mod reaper;
mod rows;
mod servers;
mod session;
mod unknown;
pub mod writer;

pub(crate) use self::host_config::chain as error_chain;
pub use self::rows::{
    stored_columns, CompletedRecord, CompleterMark, Found, PgClaim, PgRecord, RecordRef,
    RecordState, SEALED_STATUS,
};

use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio_postgres::error::SqlState;

use super::StoreError;
use crate::config::PostgresConfig;
use crate::metrics;

/// How long a start-up migration waits for a writable server ([`PgStore::migrate`]).
pub const MIGRATE_FOLLOW: Duration = Duration::from_secs(15);

/// The durable tier.
#[derive(Clone)]
pub struct PgStore {
    pool: Pool,
    /// Which server the pool writes to; stale connections ([`servers`]).
    servers: Arc<servers::Servers>,
    /// The URL's hosts and what the connection attempts learnt of them ([`connect`]).
    hosts: Arc<connect::Hosts>,
    /// `statement_timeout` of every session: Postgres ends a statement after it.
    timeout: Duration,
    /// How long the client waits for an answer: `timeout` plus a margin, so that the
    /// server's timeout normally fires first and the outcome is known.
    client_timeout: Duration,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

impl PgStore {
    /// Builds the pool; connections are made lazily, so Postgres need not be up.
    pub fn new(config: &PostgresConfig) -> Result<Self, StoreError> {
        let (mut pg, tls) = crate::tls::postgres::session(config).map_err(StoreError::PgConfig)?;
        // The URL's own `connect_timeout` (libpq's, in seconds) wins over the setting.
        let connect_timeout = (pg.get_connect_timeout().copied()).unwrap_or(config.connect_timeout);
        pg.application_name("idemgate");
        let options = session_options(pg.get_options(), config.statement_timeout);
        pg.options(options);
        let hosts = connect::Hosts::new(&pg, tls, connect_timeout).map_err(StoreError::PgConfig)?;
        let hosts = Arc::new(hosts);
        // A new connection may try every host for its whole connect timeout, then asks
        // its server where it is (one statement).
        let create = connect_timeout * hosts.len() as u32 + config.statement_timeout;
        let manager = Manager::from_connect(
            pg,
            connect::Connector(hosts.clone()),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let servers = Arc::new(servers::Servers::new());
        let pool = Pool::builder(manager)
            .pre_recycle(servers::drop_stale(servers.clone()))
            .post_create(servers::locate(servers.clone()))
            .max_size(config.pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(config.statement_timeout))
            .create_timeout(Some(create))
            .recycle_timeout(Some(config.statement_timeout))
            .build()
            .map_err(|e| StoreError::PgConfig(e.to_string()))?;
        Ok(Self {
            pool,
            servers,
            hosts,
            timeout: config.statement_timeout,
            client_timeout: client_timeout(config.statement_timeout),
        })
    }

    /// The connect timeout in force for each host (the URL's, or the setting).
    pub fn connect_timeout(&self) -> Duration {
        self.hosts.timeout()
    }

    /// A pooled connection by `deadline` (a failure noted as a statement's would be:
    /// [`servers`]); nothing has been sent when this fails. While the latest connection
    /// attempt failed on every host and no idle connection is left, fails at once and
    /// tries the hosts again in the background ([`connect`]).
    async fn checkout(&self, deadline: tokio::time::Instant) -> Result<Object, StoreError> {
        if self.hosts.open() && self.pool.status().available == 0 {
            self.hosts.probe();
            return Err(self.servers.failed(StoreError::PgNoHost(self.hosts.why())));
        }
        match tokio::time::timeout_at(deadline, self.pool.get()).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(self.servers.failed(e.into())),
            Err(_) => Err(self.servers.failed(StoreError::PgTimeout)),
        }
    }

    /// A statement on a session made at `created` got no answer in time: its server is
    /// silent, as far as the pool is concerned. Its idle connections are dropped now (so
    /// that [`Self::checkout`] sees what is left), the ones in use when they come back,
    /// and new ones try the other hosts first.
    fn no_answer(&self, created: Instant) {
        let before = self.hosts.suspect(created);
        self.servers.silent(before);
        drop(self.pool.retain(|_, made| self.servers.reusable(&made)));
    }

    /// What a transaction that answered in time came to, its outcome noted.
    fn answered<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        let result = result.map_err(timed_out);
        self.servers.outcome(&result);
        result
    }

    /// Runs `work` on a pooled session under the client's timeout (the checkout
    /// included). A session whose statement got no answer is closed ([`session`]).
    async fn timed<T, F>(
        &self,
        op: &'static str,
        work: impl FnOnce(session::Session) -> F,
    ) -> Result<T, StoreError>
    where
        F: std::future::Future<Output = Result<T, StoreError>>,
    {
        let started = Instant::now();
        let deadline = tokio::time::Instant::now() + self.client_timeout;
        let result = match self.checkout(deadline).await {
            Ok(client) => {
                let (session, lent) = session::lend(client);
                match tokio::time::timeout_at(deadline, work(session)).await {
                    Ok(answer) => {
                        lent.answered();
                        answer.map_err(timed_out)
                    }
                    Err(_) => {
                        self.no_answer(lent.created());
                        Err(StoreError::PgTimeout)
                    }
                }
            }
            Err(e) => Err(e),
        };
        metrics::postgres_op(op, started);
        self.servers.outcome(&result);
        result
    }

    /// Applies missing migrations (see [`migrate::run`]), in a session of their own that
    /// is closed afterwards: a migration (or waiting for another replica's) may take
    /// longer than the statement timeout, and nothing it sets or holds goes back to the pool.
    ///
    /// A server that is read-only or shutting down (a standby that a load balancer still
    /// sends connections to, a primary being demoted) is tried again on a new connection
    /// every half second for [`MIGRATE_FOLLOW`], so a replica starting during a failover
    /// waits for the new primary instead of exiting. A start-up that reaches no server
    /// at all (nothing listening, or no host taking a read-write session under
    /// `target_session_attrs=read-write`) fails at once, as before.
    pub async fn migrate(&self) -> Result<Vec<i32>, StoreError> {
        let deadline = Instant::now() + MIGRATE_FOLLOW;
        loop {
            match self.migrate_once().await {
                Err(e) if self.servers.gone(&e) && Instant::now() < deadline => {
                    tracing::warn!(error = %e, "postgres: cannot migrate on a read-only or stopping server; trying a new connection");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                done => return done,
            }
        }
    }

    async fn migrate_once(&self) -> Result<Vec<i32>, StoreError> {
        let mut client = Object::take(self.pool.get().await?);
        client.batch_execute("SET statement_timeout = 0").await?;
        migrate::run(&mut client).await
    }

    /// Fails unless the schema is the one this binary needs, or newer only by
    /// additive migrations ([`migrate::ADDITIVE`]).
    pub async fn check_schema(&self) -> Result<(), StoreError> {
        let client = self.pool.get().await?;
        let (database, required) = migrate::current(&client).await?;
        let binary = migrate::latest();
        if required > binary {
            Err(StoreError::SchemaTooNew { database, binary })
        } else if database < binary {
            Err(StoreError::SchemaTooOld { database, binary })
        } else {
            Ok(())
        }
    }

    /// For tests: the statements prepared on a pooled session, each with how many times
    /// it ran on a generic plan and on a custom one (`pg_prepared_statements`).
    #[doc(hidden)]
    pub async fn prepared_plans(&self) -> Result<Vec<(String, i64, i64)>, StoreError> {
        let client = self.pool.get().await?;
        let rows = (client.query(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements",
            &[],
        ))
        .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        self.timed("ping", |client| async move {
            client.simple_query("SELECT 1").await?;
            Ok(())
        })
        .await
    }
}

/// The start-up `options` of every session: generic plans, then the URL's own options
/// (which may set `plan_cache_mode` otherwise), then the statement timeout (which wins).
fn session_options(given: Option<&str>, statement_timeout: Duration) -> String {
    let ms = statement_timeout.as_millis().max(1);
    let given = given.map(str::trim).filter(|g| !g.is_empty());
    let given = given.map_or(String::new(), |g| format!("{g} "));
    format!("-c plan_cache_mode=force_generic_plan {given}-c statement_timeout={ms}")
}

/// The client's deadline for a statement: the server's, plus a quarter of it (at least
/// 50 ms, at most 1 s) for the answer to arrive.
fn client_timeout(server: Duration) -> Duration {
    server + (server / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// A statement Postgres cancelled (its `statement_timeout`) timed out, like one the
/// client gave up on; every other error keeps its source.
fn timed_out(e: StoreError) -> StoreError {
    match e {
        StoreError::Pg(e) if e.code() == Some(&SqlState::QUERY_CANCELED) => StoreError::PgTimeout,
        other => other,
    }
}
