//! The replay cache as the tiers reach it: the one place a completed record is read
//! from memory or kept there for replays (the admin API's invalidation empties it too,
//! in [`super::admin`]).

use std::sync::Arc;
use std::time::Duration;

use super::super::memory::Entry;
use super::Stores;
use crate::idempotency::{Encoded, Fingerprint, RecordId, StoredResponse};

impl Stores {
    /// A completed record this replica has seen, from memory.
    pub fn cached(&self, record: RecordId) -> Option<Arc<Entry>> {
        self.0.cache.as_ref().and_then(|c| c.get(record))
    }

    /// The replay cache's view (0 when it is off): take it before asking the tiers
    /// for a record, and remember what they answered with it. A view ends whenever
    /// this replica's view of Redis changes (see `forget_replays`); what was read in
    /// an earlier one is not cached.
    pub fn replay_view(&self) -> u64 {
        self.0.cache.as_ref().map_or(0, |c| c.view())
    }

    /// Keeps a completed record in memory for replays (when the cache is on), read in
    /// view `seen_in` ([`Stores::replay_view`]).
    pub fn remember(
        &self,
        record: RecordId,
        fingerprint: Fingerprint,
        response: &StoredResponse,
        remaining: Duration,
        seen_in: u64,
    ) {
        if let Some(cache) = &self.0.cache {
            cache.insert(record, fingerprint, response, remaining, seen_in);
        }
    }

    /// [`Stores::remember`] of a compact copy (the one an [`Encoded`] carries).
    pub fn remember_encoded(
        &self,
        record: RecordId,
        fingerprint: Fingerprint,
        response: Encoded,
        remaining: Duration,
        seen_in: u64,
    ) {
        if let Some(cache) = &self.0.cache {
            cache.insert_compact(record, fingerprint, response.compact, remaining, seen_in);
        }
    }
}
