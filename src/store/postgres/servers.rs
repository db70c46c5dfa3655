//! Which Postgres server the pool writes to, and following it when it changes.
//!
//! A statement that fails because its server turned read-only (SQLSTATE 25006, as on a
//! demoted primary or a standby) or is shutting down or starting (57P01, 57P02, 57P03)
//! marks every connection made before it as stale: none is handed out again (the
//! pool's `pre_recycle` hook drops it), so the next statement connects afresh, and with
//! `target_session_attrs=read-write` host selection finds the new primary at once. The
//! statement that failed is not retried here: its caller decides (a claim that failed
//! is not a claim; a completion goes back to the write-through retry queue).
//!
//! A server that says nothing at all is treated the same way: a statement that got no
//! answer within the client's timeout ([`Servers::silent`]; Postgres' own statement
//! timeout, which answers, fires first on a server that is merely slow) marks the
//! connections to that server as stale, so the pool's other sessions to a host that
//! was powered off or cut off are not each tried, one request and one timeout at a
//! time, until the kernel gives up on them.
//!
//! Each new connection asks its server where it is (one query per connection, none per
//! statement): `idemgate_postgres_primary_info{host}` names it, and a change from the
//! server before counts in `idemgate_postgres_failovers_total`. `idemgate_postgres_up`
//! follows every statement: 0 after one failed for lack of a writable server.

use std::sync::Mutex;
use std::time::Instant;

use deadpool_postgres::{ClientWrapper, Hook, HookError, Metrics};
use tokio_postgres::error::SqlState;

use crate::metrics;
use crate::store::StoreError;

/// The pool's view of its servers (shared with the pool's hooks).
pub(super) struct Servers {
    /// Connections made before this instant are not handed out again.
    stale_before: Mutex<Option<Instant>>,
    /// `host:port` of the server the latest new connection reached.
    current: Mutex<Option<String>>,
    up: ::metrics::Gauge,
}

/// Asked of every new connection: the server's address and port as it sees them.
const WHERE: &str = "SELECT coalesce(host(inet_server_addr()), 'local') || ':' || \
                     current_setting('port')";

impl Servers {
    pub(super) fn new() -> Self {
        Self {
            stale_before: Mutex::new(None),
            current: Mutex::new(None),
            up: metrics::postgres_up(),
        }
    }

    /// Notes the outcome of a statement: whether a writable server answered, and
    /// whether the pool's connections must be made again.
    pub(super) fn outcome<T>(&self, result: &Result<T, StoreError>) {
        match result {
            Ok(_) => self.up.set(1.0),
            Err(e) => self.note(e),
        }
    }

    /// [`Self::outcome`] of a statement that failed with `e`, which it returns.
    pub(super) fn failed(&self, e: StoreError) -> StoreError {
        self.note(&e);
        e
    }

    /// A statement got no answer in time: connections made before `before` are not
    /// handed out again, as after [`Unavailable::ServerGone`].
    pub(super) fn silent(&self, before: Instant) {
        self.up.set(0.0);
        let mut stale = lock(&self.stale_before);
        *stale = Some(stale.map_or(before, |at| at.max(before)));
    }

    /// [`Self::failed`] for a caller that retries: whether `e` says the server is
    /// read-only or shutting down (its connections are then stale).
    pub(super) fn gone(&self, e: &StoreError) -> bool {
        self.note(e);
        unavailable(e) == Unavailable::ServerGone
    }

    fn note(&self, e: &StoreError) {
        match unavailable(e) {
            Unavailable::No => self.up.set(1.0),
            Unavailable::Unreachable => self.up.set(0.0),
            Unavailable::ServerGone => {
                self.up.set(0.0);
                *lock(&self.stale_before) = Some(Instant::now());
            }
        }
    }

    /// Whether a pooled connection may be handed out again.
    pub(super) fn reusable(&self, metrics: &Metrics) -> bool {
        lock(&self.stale_before).map_or(true, |before| metrics.created >= before)
    }

    /// A new connection reached `host`.
    fn connected(&self, host: String) {
        self.up.set(1.0);
        let mut current = lock(&self.current);
        if current.as_deref() != Some(&*host) {
            metrics::postgres_primary(current.as_deref(), &host);
            if current.is_some() {
                tracing::warn!(server = %host, "postgres: now writing to another server");
            }
            *current = Some(host);
        }
    }
}

/// The `pre_recycle` hook: stale connections are dropped, not reused.
pub(super) fn drop_stale(servers: std::sync::Arc<Servers>) -> Hook {
    Hook::sync_fn(move |_, metrics| match servers.reusable(metrics) {
        true => Ok(()),
        false => Err(HookError::message("made before its server went read-only")),
    })
}

/// The `post_create` hook: which server the new connection reached.
pub(super) fn locate(servers: std::sync::Arc<Servers>) -> Hook {
    Hook::async_fn(move |client: &mut ClientWrapper, _| {
        let servers = servers.clone();
        Box::pin(async move {
            match client.query_one(WHERE, &[]).await {
                Ok(row) => servers.connected(row.get(0)),
                Err(e) => tracing::debug!(error = %e, "postgres: cannot tell which server"),
            }
            Ok(())
        })
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Why a statement failed, as far as the server is concerned.
#[derive(Debug, PartialEq, Eq)]
enum Unavailable {
    /// The server answered (the statement itself was refused): it is up.
    No,
    /// No server answered (connection refused, lost, or too slow).
    Unreachable,
    /// The server is read-only or shutting down: connections to it are no use.
    ServerGone,
}

fn unavailable(e: &StoreError) -> Unavailable {
    match e {
        StoreError::PgShared(inner) => unavailable(inner),
        StoreError::PgTimeout | StoreError::PgPool(_) | StoreError::PgNoHost(_) => {
            Unavailable::Unreachable
        }
        StoreError::Pg(e) => match e.code() {
            Some(code) if server_gone(code) => Unavailable::ServerGone,
            Some(code) if code.code().starts_with("08") => Unavailable::Unreachable,
            Some(_) => Unavailable::No,
            None => Unavailable::Unreachable,
        },
        _ => Unavailable::No,
    }
}

/// SQLSTATEs of a server that cannot take writes on this connection any more.
fn server_gone(code: &SqlState) -> bool {
    [
        SqlState::READ_ONLY_SQL_TRANSACTION,
        SqlState::ADMIN_SHUTDOWN,
        SqlState::CRASH_SHUTDOWN,
        SqlState::CANNOT_CONNECT_NOW,
    ]
    .contains(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_gone_or_silent_makes_connections_stale() {
        let servers = Servers::new();
        let early = Instant::now();
        let before = Metrics::default();
        assert!(servers.reusable(&before));
        servers.outcome::<()>(&Err(StoreError::PgTimeout));
        assert!(
            servers.reusable(&before),
            "a timeout alone (a checkout) says nothing of the pooled sessions"
        );
        servers.silent(Instant::now());
        assert!(!servers.reusable(&before), "a statement that got no answer");
        servers.silent(early);
        assert!(
            !servers.reusable(&before),
            "an older mark does not undo a newer one"
        );
        assert!(servers.reusable(&Metrics::default()), "made after: kept");
        assert!(server_gone(&SqlState::READ_ONLY_SQL_TRANSACTION));
        assert!(!server_gone(&SqlState::UNIQUE_VIOLATION));
    }
}
