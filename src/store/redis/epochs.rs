//! The epoch markers of vouched claims: what tells a Redis that lost its data (a flush,
//! a restart without its AOF) from a new one, and whether such a loss can have lost a
//! claim Redis kept alone (only once the deployment recorded its markers in Postgres)
//! or nothing Postgres does not arbitrate.

use std::sync::atomic::Ordering;

use fred::prelude::{KeysInterface as _, Value};

use super::cold_slots::Bits;
use super::RedisStore;
use crate::store::StoreError;

/// Whether any claim of this deployment may have been kept by Redis alone: its epoch
/// markers recorded as written in Postgres (`idemgate_redis_epochs`), read afresh.
#[derive(Clone)]
pub struct KeptAloneCheck(
    pub  std::sync::Arc<
        dyn Fn() -> futures_util::future::BoxFuture<'static, Result<bool, StoreError>>
            + Send
            + Sync,
    >,
);

impl std::fmt::Debug for KeptAloneCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeptAloneCheck")
    }
}

impl RedisStore {
    /// Writes "0" into every slot's epoch marker that has none (`SET NX`): a slot of a
    /// new deployment has lost nothing. Concurrent with others' claims, which set a
    /// missing marker to their own clock first (those slots then count once).
    pub async fn write_epoch_markers(&self) -> Result<(), StoreError> {
        for shard in self.shards() {
            self.mark_epochs(&shard.slots, "0").await?;
        }
        if let Some(vouch) = &self.inner.vouch {
            vouch.swept.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Whether this replica wrote the epoch markers once ([`Self::write_epoch_markers`]).
    pub fn epochs_swept(&self) -> bool {
        (self.inner.vouch.as_ref()).map_or(true, |v| v.swept.load(Ordering::Relaxed))
    }

    /// A claim found the epoch marker of `slot` missing and set it to `since` (ms of
    /// Redis' clock): the server serving it lost its data (or is new), so every slot of
    /// that shard lost it at the same time. Their markers are set to `since` too (`SET
    /// NX`, in the background, one marking per replica at a time), so that each slot's
    /// quarantine runs from this first sight instead of from its own first claim.
    pub fn lost_data(&self, slot: u16, since: i64) {
        self.mark_shard(
            slot,
            since,
            "redis lost this shard's data (an epoch marker is \
            missing): its absent keys count as in flight for the quarantine",
        );
    }

    /// Sets the missing epoch markers of `slot`'s shard to `since` in the background
    /// (one marking per replica at a time), after logging `why`.
    fn mark_shard(&self, slot: u16, since: i64, why: &'static str) {
        let Some(vouch) = &self.inner.vouch else {
            return;
        };
        let Ok(one) = vouch.marking.clone().try_lock_owned() else {
            return;
        };
        let store = self.clone();
        tokio::spawn(async move {
            let _one = one;
            let shard = store.shard_of(slot);
            tracing::warn!(shard = %shard.name, "{why}");
            if let Err(e) = store.mark_epochs(&shard.slots, &since.to_string()).await {
                tracing::warn!(error = %e, "could not mark the shard's epoch markers; each \
                    slot's first claim finds its own missing");
            }
        });
    }

    /// `SET NX` of the epoch markers of `slots` to `value`, 256 per pipeline on the
    /// slots' connection (a few writes, a few fsyncs, instead of one per key).
    async fn mark_epochs(&self, slots: &Bits, value: &str) -> Result<(), StoreError> {
        let Some(vouch) = &self.inner.vouch else {
            return Ok(());
        };
        let slots = super::cold_slots::slots_of(slots);
        for chunk in slots.chunks(256) {
            let pipeline = self.inner.lanes.for_slot(chunk[0]).pipeline();
            for &slot in chunk {
                let key = vouch.epochs.all()[usize::from(slot)].as_str();
                let nx = Some(fred::types::SetOptions::NX);
                let _: () = (pipeline.set(key, value, None, nx, false)).await?;
            }
            let _: Vec<Value> = pipeline.all().await?;
        }
        Ok(())
    }

    /// Whether this deployment's epoch markers are known to be written (true where
    /// claims are not vouched: there are none to write).
    pub fn epochs_written(&self) -> bool {
        (self.inner.vouch.as_ref()).map_or(true, |v| v.written.load(Ordering::Relaxed))
    }

    /// This deployment's epoch markers are written, from now on.
    pub fn mark_epochs_written(&self) {
        if let Some(vouch) = &self.inner.vouch {
            vouch.written.store(true, Ordering::Relaxed);
        }
    }

    /// Vouched claims: how to ask Postgres whether the deployment may have kept a
    /// claim in Redis alone (set once, by the stores).
    pub fn set_kept_alone_check(&self, check: KeptAloneCheck) {
        if let Some(vouch) = &self.inner.vouch {
            let _ = vouch.kept_alone.set(check);
        }
    }

    /// Whether the loss that left `slot`'s epoch marker at `marker` may have lost a
    /// claim kept by Redis alone, as far as this replica knows or Postgres says now
    /// (`true` where it cannot tell). If not, it lost nothing Postgres does not
    /// arbitrate: its shard's markers up to `marker` mark no loss to wait out
    /// ([`RedisStore::harmless_upto`]). What Postgres says is final once true; false
    /// holds for the losses before the question (a claim is kept alone only once the
    /// markers are recorded: [`RedisStore::epochs_written`]). One question at a time.
    pub(super) async fn ask_kept_alone(&self, slot: u16, marker: i64) -> bool {
        let Some(vouch) = &self.inner.vouch else {
            return true;
        };
        let _one = vouch.asking.lock().await;
        if self.epochs_written() {
            return true;
        }
        // Answered meanwhile for this loss (the value came from a question asked after
        // its marker was set).
        if self.harmless_upto(slot).is_some_and(|upto| upto >= marker) {
            return false;
        }
        let Some(check) = vouch.kept_alone.get() else {
            return true;
        };
        match (check.0)().await {
            Ok(true) => {
                self.mark_epochs_written();
                true
            }
            Ok(false) => {
                self.loss_lost_nothing(slot, marker);
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot ask postgres whether redis kept claims \
                    alone: a slot that lost its data waits out its quarantine");
                true
            }
        }
    }

    /// The moment (ms of Redis' clock) up to which an epoch marker of `slot` marks a
    /// loss known to have lost no claim kept by Redis alone; only until the markers are
    /// recorded, and for one quarantine after the question (later, such a marker is too
    /// old to hold a claim anyway).
    pub(super) fn harmless_upto(&self, slot: u16) -> Option<i64> {
        let vouch = self.inner.vouch.as_ref()?;
        let at = vouch.harmless[usize::from(slot)].load(Ordering::Relaxed);
        if at == 0 || self.epochs_written() {
            return None;
        }
        let now = vouch.born.elapsed().as_millis() as u64;
        (now < vouch.harmless_until.load(Ordering::Relaxed)).then_some(at)
    }

    /// Postgres showed that the loss that left `slot` with the epoch marker `marker`
    /// lost no claim kept by Redis alone: its shard's markers up to `marker` mark no
    /// loss to wait out, and those still missing are set to it.
    fn loss_lost_nothing(&self, slot: u16, marker: i64) {
        let Some(vouch) = &self.inner.vouch else {
            return;
        };
        let shard = self.shard_of(slot);
        for s in super::cold_slots::slots_of(&shard.slots) {
            vouch.harmless[usize::from(s)].fetch_max(marker, Ordering::Relaxed);
        }
        let until = vouch.born.elapsed() + vouch.quarantine;
        (vouch.harmless_until).fetch_max(until.as_millis() as u64, Ordering::Relaxed);
        self.mark_shard(
            slot,
            marker,
            "redis lost this shard's data (an epoch marker is \
            missing) before any claim was kept by redis alone: postgres arbitrates every \
            earlier claim, so its absent keys wait out no quarantine",
        );
    }
}
