//! The completer's side of the tiers: the abandoned requests of one pass (Postgres
//! decides: the resendable requests live there), and the end of an attempt that did not
//! settle as a first execution would: handed back for a later attempt, or given up.

use super::super::lease::Held;
use super::super::postgres::abandoned::{Found, PassLimits};
use super::super::StoreError;
use super::settle::lease_ref;
use super::Stores;
use crate::idempotency::{Binding, Home, ResendableRequest};

impl Stores {
    /// One pass's abandoned requests (see [`crate::store::postgres::abandoned`]);
    /// `None` when another replica runs the pass, or without Postgres.
    pub async fn abandoned(&self, limits: PassLimits) -> Result<Option<Found>, StoreError> {
        match &self.0.postgres {
            Some(pg) => pg.store.abandoned(limits).await,
            None => Ok(None),
        }
    }

    /// Opens a resendable request as stored at `at` (the one place one is opened).
    pub fn open_resendable(
        &self,
        stored: bytes::Bytes,
        at: Binding,
    ) -> Result<ResendableRequest, StoreError> {
        let plain = self.0.sealing.open_request(stored, at)?;
        ResendableRequest::decode(plain).map_err(|_| StoreError::Corrupt("resendable request"))
    }

    /// Ends the completer's lease without a response: in Redis it is released; in
    /// Postgres it ends now, the row and its resendable request stay for the next attempt
    /// (`give_up` false) or are marked given up (true).
    pub(crate) async fn hand_back(&self, lease: &Held, give_up: bool) -> Result<(), StoreError> {
        if let Home::Redis { .. } = lease.home {
            let released = self.0.redis.release(&lease.redis_key, &lease.token).await;
            if let Err(e) = released {
                tracing::debug!(key_hash = %lease.record.short(), error = %e,
                    "could not release the completer's redis lease; it expires");
            }
        }
        let Some(pg) = &self.0.postgres else {
            return Ok(());
        };
        let rec = lease_ref(lease);
        match give_up {
            false => pg.store.hand_back(rec, &lease.token).await.map(drop),
            true => pg.store.give_up(rec, &lease.token).await.map(drop),
        }
    }
}
