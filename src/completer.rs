//! The completer: drives requests abandoned partway to completion (docs/completer.md).
//!
//! On a route with `idempotency.completer = true` (write-through claims only), a request
//! keeps its request with its durable lease ([`crate::idempotency::resendable`]). If the
//! replica holding it dies and the client never retries, the lease expires with no
//! completion. Every `postgres.completer_interval`, one replica at a time (an advisory
//! lock, as the reaper's) reserves such leases expired more than
//! `postgres.completer_grace` ago ([`crate::store::postgres::abandoned`]); each is then
//! taken over by the same claim a client's retry makes ([`Stores::claim`]: a new lock
//! token and a higher fencing token, in Redis and Postgres), so a retry racing it gets
//! 409 or the stored result, never a second execution. The resendable request is sent again
//! with its `Idempotency-Key`, the new `Idempotency-Fencing-Token` and
//! `Idempotency-Completer: 1`, and settled as a first execution would be
//! ([`flow::run()`]): stored, so that a later retry replays it. An attempt that the
//! upstream refuses (a release status: the key is freed, as for a first execution) or
//! does not answer is tried again after a backoff that doubles; after
//! `postgres.completer_attempts` the request is given up: counted, logged once with
//! its `key_hash`, and marked in the admin API.
//!
//! [`Stores::claim`]: crate::store::Stores::claim

use std::sync::Arc;

use tracing::Instrument;

use crate::app::App;
use crate::flow::{self, Runner, Settled};
use crate::idempotency::{Binding, Claim};
use crate::metrics;
use crate::store::postgres::abandoned::{Abandoned, Found, PassLimits};
use crate::store::tiers::Resendable;
use crate::store::StoreError;
use crate::telemetry;

/// Whether any route keeps requests for the completer (and so whether it runs).
pub fn wanted(app: &App) -> bool {
    app.config.postgres.is_some() && app.routes.iter().any(|r| r.policy.settings.completer)
}

/// Spawns the completer's loop, when [`wanted`]: a pass every `completer_interval`.
pub fn spawn(app: Arc<App>) -> Option<tokio::task::JoinHandle<()>> {
    let pg = app.config.postgres.as_ref()?;
    if !wanted(&app) {
        return None;
    }
    if app.config.encryption.is_none() {
        tracing::warn!(
            "completer = true without [encryption]: resendable requests (their headers, \
            credentials and idempotency keys among them) are stored in the clear in postgres \
            while in flight (docs/completer.md)"
        );
    }
    let every = pg.completer_interval;
    Some(tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            if let Err(e) = pass(&app).await {
                tracing::warn!(error = %e, "completer pass failed");
            }
        }
    }))
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassReport {
    /// False when another replica ran the pass.
    pub ran: bool,
    /// Each attempt's outcome (a name of `COMPLETER_OUTCOME_NAMES` in `metrics::completer`).
    pub outcomes: Vec<&'static str>,
}

/// One pass: [`reserve`], then [`attempt_all`].
pub async fn pass(app: &Arc<App>) -> Result<PassReport, StoreError> {
    match reserve(app).await? {
        Some(found) => Ok(attempt_all(app, found).await),
        None => Ok(PassReport::default()),
    }
}

/// The first half of a pass: under the fleet-wide lock, gives up the requests out of
/// attempts and reserves a batch of abandoned ones. `None` when another replica runs
/// the pass.
pub async fn reserve(app: &Arc<App>) -> Result<Option<Found>, StoreError> {
    let Some(pg) = &app.config.postgres else {
        return Ok(None);
    };
    let limits = PassLimits {
        grace: pg.completer_grace,
        batch: pg.completer_batch,
        attempts: pg.completer_attempts,
        backoff: pg.completer_interval,
    };
    match app.stores.abandoned(limits).await {
        Ok(Some(found)) => {
            metrics::completer_pass("ran");
            Ok(Some(found))
        }
        Ok(None) => {
            metrics::completer_pass("skipped");
            Ok(None)
        }
        Err(e) => {
            metrics::completer_pass("failed");
            Err(e)
        }
    }
}

/// The second half of a pass: counts and logs the requests given up, and attempts each
/// reserved one, all at once; waits for them.
pub async fn attempt_all(app: &Arc<App>, found: Found) -> PassReport {
    let attempts_max = app
        .config
        .postgres
        .as_ref()
        .map_or(0, |pg| pg.completer_attempts);
    let mut report = PassReport {
        ran: true,
        outcomes: Vec::new(),
    };
    for (id, route) in &found.given_up {
        metrics::completer_outcome("given_up");
        report.outcomes.push("given_up");
        tracing::error!(key_hash = %id.short(), route = %route,
            attempts = attempts_max,
            "completer gave up on an abandoned request: the upstream refused or never \
            answered it; its outcome is unknown until a client retries it");
    }
    // Detached tasks, tracked as requests are (shutdown waits for them): a pass that is
    // stopped leaves them running to the end, since a lease dropped mid-attempt would
    // be released, and its resendable request with it.
    let attempts: Vec<_> = (found.reserved.into_iter())
        .map(|abandoned| {
            // Always traced where spans are exported (target `telemetry::context::TRACED`):
            // few, and each worth finding.
            let span = telemetry::dispatch::made_under(|| {
                tracing::info_span!(target: "idemgate::traced", "completer",
                    route = %abandoned.route,
                    key_hash = %abandoned.id.short(), attempt = abandoned.attempt)
            });
            let attempt = attempt(app.clone(), abandoned).instrument(span);
            (app.tasks).spawn(telemetry::dispatch::under_exporter(attempt))
        })
        .collect();
    for done in attempts {
        let outcome = done.await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "completer attempt failed");
            "error"
        });
        metrics::completer_outcome(outcome);
        report.outcomes.push(outcome);
    }
    report
}

/// One attempt at one abandoned request: its outcome.
async fn attempt(app: Arc<App>, abandoned: Abandoned) -> &'static str {
    let Some(route) = app
        .routes
        .iter()
        .find(|r| r.name == abandoned.route)
        .cloned()
    else {
        tracing::warn!("completer: the abandoned request's route is gone; tried again later");
        return "error";
    };
    let resend = Resendable::TakenOver(abandoned.request.clone());
    let (scope, record) = (abandoned.scope, abandoned.id);
    let claimed = (app.stores).claim(&route, scope, record, &abandoned.fingerprint, resend);
    let lease = match claimed.await {
        Ok(Claim::Acquired(lease)) => lease,
        Ok(Claim::Completed { .. }) => return "already_completed",
        Ok(Claim::InFlight { .. }) => return "in_flight",
        Ok(Claim::Mismatch) => return "mismatch",
        Ok(Claim::Bypassed) => return "error",
        Err(e) => {
            tracing::warn!(error = %e, "completer: could not take the abandoned request over");
            return "error";
        }
    };
    metrics::completer_takeover();
    let at = Binding { scope, record };
    let request = (app.stores.open_resendable(abandoned.request, at)).and_then(|request| {
        request
            .into_parts()
            .map_err(|_| StoreError::Corrupt("resendable request"))
    });
    let (mut parts, body, peer) = match request {
        Ok(request) => request,
        Err(e) => {
            tracing::error!(error = %e, "completer gave up on an abandoned request: its kept \
                request cannot be read; its outcome is unknown until a client retries it");
            if let Err(e) = lease.give_up().await {
                tracing::warn!(error = %e, "could not mark the request given up");
            }
            return "given_up";
        }
    };
    tracing::info!(
        fence = lease.fence(),
        "completer: sending an abandoned request again"
    );
    telemetry::context::link_abandoned(&tracing::Span::current(), &parts.headers);
    // Its span is exported whole, wherever spans are: so are its phases.
    if telemetry::context::exporting() {
        parts.extensions.insert(telemetry::context::Traced);
    }
    let request = http::Request::from_parts(parts, body);
    let ran = flow::run(app, route, lease, request, peer, Runner::Completer, None);
    let (_, _, settled) = Box::pin(ran).await;
    match settled {
        Settled::Stored => "completed",
        Settled::Released => "refused",
        Settled::Failed => "retry",
        Settled::LeaseLost => "lease_lost",
        Settled::NotStored => "not_stored",
    }
}
