//! The outcome of claiming a key, and the lease a winner holds until it settles.
//!
//! [`Claim`] is decoded from the claim script's reply in exactly one place
//! ([`RedisStore::claim`]). A [`Lease`] is a guard: it must be completed with a
//! response or released; one dropped unsettled releases itself in the background.

use std::time::Duration;

use bytes::Bytes;

use super::fingerprint::{Fingerprint, RecordId};
use super::replay::StoredResponse;
use crate::store::{RedisStore, StoreError};

/// What the store said about a (scope, key) when this request tried to claim it.
#[derive(Debug)]
pub enum Claim {
    /// This request holds the lease and must run the upstream call.
    Acquired(Lease),
    /// A response is stored for the same fingerprint: replay it.
    Completed(StoredResponse),
    /// Another request holds the lease for `remaining`.
    InFlight { remaining: Duration },
    /// The key was used with a different request.
    Mismatch,
}

/// The result of completing a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// The response is stored and will be replayed.
    Stored,
    /// The lease had been taken over by another request; nothing was overwritten.
    LeaseLost,
}

/// The result of releasing a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The record is gone; a retry runs again.
    Released,
    /// The record was not ours any more (completed or leased by another token).
    NotHeld,
}

/// A held claim on one record. Settle it with [`Lease::complete`] or [`Lease::release`].
#[derive(Debug)]
pub struct Lease {
    store: RedisStore,
    key: String,
    token: String,
    record: RecordId,
    fingerprint: Fingerprint,
    settled: bool,
}

impl Lease {
    pub(crate) fn new(
        store: RedisStore,
        key: String,
        token: String,
        record: RecordId,
        fingerprint: Fingerprint,
    ) -> Self {
        Self {
            store,
            key,
            token,
            record,
            fingerprint,
            settled: false,
        }
    }

    pub fn record(&self) -> RecordId {
        self.record
    }

    /// Stores `encoded` (a [`StoredResponse::encode`]d response) for `ttl`, if the lease
    /// is still ours.
    pub async fn complete(
        mut self,
        encoded: Bytes,
        ttl: Duration,
    ) -> Result<Completion, StoreError> {
        self.settled = true;
        (self.store)
            .complete(&self.key, &self.token, encoded, ttl, &self.fingerprint)
            .await
    }

    /// Drops the lease so that a retry runs the request again.
    pub async fn release(mut self) -> Result<Release, StoreError> {
        self.settled = true;
        self.store.release(&self.key, &self.token).await
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        tracing::warn!(record = %self.record.short(), "lease dropped unsettled; releasing it");
        let (store, key, token) = (
            self.store.clone(),
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.token),
        );
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = store.release(&key, &token).await;
            });
        }
    }
}
