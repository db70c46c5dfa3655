//! The lease guard: a held claim on one record. It exists only once a store said
//! "acquired", and it must end in exactly one of [`Lease::complete`] (with a response)
//! or [`Lease::release`]; both consume it. A lease dropped without either (a task
//! that panicked, a claim whose caller went away) releases itself in the background.
//!
//! The lease's owner is the gateway, not a client connection: see `Stores::claim`.
//!
//! The heartbeat ([`Held::heartbeat`]): while the holder works on a record (the
//! upstream call, then storing its response), the lease is pushed out by `lock_ttl`
//! every third of `lock_ttl`, so it cannot lapse under a live holder and let a
//! duplicate run.
//!
//! Storing is covered too ([`Lease::complete`]): completing in Redis may take
//! several attempts (three, each bounded by `redis.command_timeout`; with Redis as the only
//! store, as long as the lease lasts: see `Held::runs_out_at`) and then the
//! write-through to Postgres (bounded by `postgres.statement_timeout`, which may exceed
//! `lock_ttl`). Once Redis holds the completion the beats answer "not held" (nothing to
//! extend: duplicates replay); until then they keep the lease, so a duplicate finds the
//! key in flight. If this process dies, the beats stop and the lease ends.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{StoreError, Stores};
use crate::idempotency::{
    Completion, Encoded, Expiry, Fingerprint, Home, RecordId, Release, Scope, StoredResponse,
};

/// What the holder does while its lease beats (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The upstream call: a lost lease is worth a warning.
    Upstream,
    /// Storing the response: "not held" is expected once Redis has it.
    Settle,
}

/// What a held lease is: where it lives, its token, and the record it holds.
#[derive(Debug)]
pub struct Held {
    pub(crate) stores: Stores,
    pub(crate) home: Home,
    pub(crate) redis_key: String,
    pub(crate) token: String,
    pub(crate) route: String,
    /// The route's `lock_ttl`: how long the lease lasts without a heartbeat.
    pub(crate) lock_ttl: Duration,
    pub(crate) scope: Scope,
    pub(crate) record: RecordId,
    pub(crate) fingerprint: Fingerprint,
    /// Grows with every acquisition of this key; forwarded as `Idempotency-Fencing-Token`.
    pub(crate) fence: i64,
    /// Taken over from a lease that lapsed with no completion (Postgres knows, where it
    /// holds leases): an execution may have run, and gone away.
    pub(crate) after_lapse: bool,
    /// The replay cache's view when the claim started: the completed response is
    /// cached only if it has not changed since ([`Stores::replay_view`]).
    pub(crate) view: u64,
    /// When this replica took the lease (just after the claim answered).
    pub(crate) claimed_at: Instant,
    /// Milliseconds after `claimed_at` at which the lease runs out, as far as this
    /// replica knows: the claim's `lock_ttl`, pushed out by every heartbeat that landed.
    pub(crate) runs_out_ms: AtomicU64,
    /// The answer went live (streamed to its client as it came): with
    /// `postgres.redis_fill = "on_replay"`, it is still completed in Redis, where its
    /// joiners look for the record.
    pub(crate) live: bool,
}

impl Held {
    pub fn record(&self) -> RecordId {
        self.record
    }

    pub fn scope(&self) -> Scope {
        self.scope
    }

    pub fn home(&self) -> Home {
        self.home
    }

    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    pub fn fence(&self) -> i64 {
        self.fence
    }

    /// Whether this lease was taken over from one that lapsed with no completion.
    pub fn after_lapse(&self) -> bool {
        self.after_lapse
    }

    /// The replay cache's view when the claim started.
    pub fn view(&self) -> u64 {
        self.view
    }

    /// Pushes the lease out by `lease` (the heartbeat); false if it is not ours any more.
    pub async fn extend(&self, lease: Duration) -> Result<bool, StoreError> {
        let sent = self.claimed_at.elapsed();
        let held = self.stores.extend(self, lease).await?;
        if held {
            let until = u64::try_from((sent + lease).as_millis()).unwrap_or(u64::MAX);
            self.runs_out_ms.fetch_max(until, Ordering::Relaxed);
        }
        Ok(held)
    }

    /// When the lease runs out unless another heartbeat lands: counted from when the
    /// claim answered or the last extension was sent, so slightly late, never early
    /// by more than the claim's own round trip. It bounds how long settling keeps
    /// retrying; the stores' token checks, not this clock, keep a late write out.
    pub fn runs_out_at(&self) -> Instant {
        self.claimed_at + Duration::from_millis(self.runs_out_ms.load(Ordering::Relaxed))
    }

    /// Drives `work` while extending the lease every third of `lock_ttl`.
    ///
    /// `work` comes pinned by the caller: an async fn keeps a future it takes by value
    /// twice (the argument, and the local it is pinned in), which doubled the size of
    /// every request's future (the completion's is ~8 KiB, most of it fred's) and so
    /// the bytes copied each time that future moves.
    pub async fn heartbeat<F: Future>(&self, mut work: Pin<&mut F>, phase: Phase) -> F::Output {
        let every = self.lock_ttl / 3;
        // A pinned `Sleep`, not an `Interval` (which boxes one): nothing allocated on
        // this per-request path.
        let beat = tokio::time::sleep(every);
        tokio::pin!(beat);
        let mut lost = false;
        loop {
            tokio::select! {
                answer = &mut work => return answer,
                () = &mut beat => {
                    // Boxed: a beat is rare (slow requests only), and inline the extension
                    // would grow the future of every upstream call and completion.
                    match Box::pin(self.extend(self.lock_ttl)).await {
                        Ok(true) => {}
                        Ok(false) if !lost && phase == Phase::Upstream => {
                            lost = true;
                            tracing::warn!("lease lost during the upstream call; its result will not overwrite");
                        }
                        Ok(false) => lost = true,
                        Err(e) if phase == Phase::Upstream => tracing::warn!(error = %e,
                            "could not extend the lease; retrying at the next beat"),
                        Err(e) => tracing::debug!(error = %e,
                            "could not extend the lease while storing; retrying at the next beat"),
                    }
                    beat.as_mut().reset(tokio::time::Instant::now() + every);
                }
            }
        }
    }
}

/// A held claim on one record. Settle it with [`Lease::complete`] or [`Lease::release`].
#[derive(Debug)]
pub struct Lease {
    /// Present until the lease is settled; settling consumes the lease, so every
    /// reference to a `Lease` sees it held.
    held: Option<Held>,
}

impl std::ops::Deref for Lease {
    type Target = Held;

    fn deref(&self) -> &Held {
        // Only `complete`, `release` and `drop` take it, and each consumes the lease.
        self.held
            .as_ref()
            .expect("a lease holds its claim until settling consumes it")
    }
}

impl Lease {
    /// A lease the stores just acquired.
    pub(crate) fn new(held: Held) -> Self {
        Self { held: Some(held) }
    }

    /// Where the lease lives, once a second tier holds it too.
    pub(super) fn set_home(&mut self, home: Home) {
        if let Some(held) = self.held.as_mut() {
            held.home = home;
        }
    }

    /// The answer goes live (see [`Held::live`]).
    pub fn went_live(&mut self) {
        if let Some(held) = self.held.as_mut() {
            held.live = true;
        }
    }

    /// The fencing token, once a second tier issued the one that counts (write-through
    /// claims: Postgres'), and whether Postgres found this lease following a lapsed one
    /// (added to what Redis said).
    pub(super) fn set_fence(&mut self, fence: i64, after_lapse: bool) {
        if let Some(held) = self.held.as_mut() {
            held.fence = fence;
            // Redis may have said so already (a vouched record outlives its lease).
            held.after_lapse |= after_lapse;
        }
    }

    /// Settles the lease by hand: the caller takes over settling what it holds.
    pub(super) fn into_held(mut self) -> Held {
        self.held
            .take()
            .expect("a lease holds its claim until settling consumes it")
    }

    /// Stores `response` until `expiry` if the lease is still ours (and writes it
    /// through to Postgres when configured), extending the lease until it is stored.
    pub async fn complete(
        self,
        response: &StoredResponse,
        expiry: Expiry,
    ) -> Result<Completion, StoreError> {
        self.complete_encoded(&response.encoded(), expiry).await
    }

    /// [`Lease::complete`] with a response encoded once by the caller, who may keep
    /// its compact copy (the replay cache).
    pub async fn complete_encoded(
        self,
        response: &Encoded,
        expiry: Expiry,
    ) -> Result<Completion, StoreError> {
        let held = self.into_held();
        // The lease beats until the response is stored (see [`Held::heartbeat`]).
        let storing = std::pin::pin!(held.stores.complete(&held, response, expiry));
        let completed = (held.heartbeat(storing, Phase::Settle)).await;
        completed
    }

    /// Drops the lease so that a retry runs the request again.
    pub async fn release(self) -> Result<Release, StoreError> {
        let held = self.into_held();
        held.stores.release(&held).await
    }

    /// The completer's attempt got no answer: ends the lease now, keeping the request
    /// for its next attempt (a client's retry may take the key over meanwhile).
    pub async fn hand_back(self) -> Result<(), StoreError> {
        let held = self.into_held();
        held.stores.hand_back(&held, false).await
    }

    /// The completer gives the request up: ends the lease now, marks the record.
    pub async fn give_up(self) -> Result<(), StoreError> {
        let held = self.into_held();
        held.stores.hand_back(&held, true).await
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(held) = self.held.take() else {
            return;
        };
        tracing::warn!(key_hash = %held.record.short(), "lease dropped unsettled; releasing it");
        // `Held` has no drop of its own: if a runtime that is shutting down drops this
        // task unpolled, nothing spawns again.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = held.stores.release(&held).await;
            });
        }
    }
}
