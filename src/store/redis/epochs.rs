//! The epoch markers, read by every claim where `[postgres]` is configured: what tells a
//! Redis that lost its data (a flush, a restart without its AOF) from a new one, and
//! whether such a loss can have lost a claim Redis kept alone (only once the deployment
//! recorded its markers in Postgres: a replica with `claims = "vouched"` ran) or nothing
//! Postgres does not arbitrate. Every mode honours a loss the same way, so that a fleet
//! whose replicas run different claim modes (a rolling switch) runs no key twice.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use fred::prelude::{KeysInterface as _, Value};

use super::cold_slots::{Bits, SlotSet};
use super::slots::SlotMarkers;
use super::RedisStore;
use crate::store::StoreError;

/// The epoch markers and what this replica knows of them.
#[derive(Debug)]
pub struct Epochs {
    /// The epoch marker of every slot (`lua/claim.lua`, KEYS[4]).
    pub markers: SlotMarkers,
    /// How long after its epoch marker was set a key absent from the slot counts as in
    /// flight: long enough for every holder of a lease the slot lost to have sent a
    /// heartbeat, which writes the lease back (`lua/extend.lua`).
    pub quarantine: Duration,
    /// One marking of a shard's epoch markers at a time ([`RedisStore::lost_data`]).
    marking: Arc<tokio::sync::Mutex<()>>,
    /// This deployment's markers are known to be recorded (by this replica or another):
    /// a claim may have been kept by Redis alone.
    written: AtomicBool,
    /// Asks Postgres whether the markers were recorded ([`RedisStore::ask_kept_alone`]).
    kept_alone: OnceLock<KeptAloneCheck>,
    /// By slot: an epoch marker set at or before this moment (ms of Redis' clock, 0:
    /// none) marks a loss Postgres showed lost no claim kept alone (`lua/claim.lua`,
    /// ARGV[8]).
    harmless: Box<[AtomicI64]>,
    /// Until when (ms after `born`) `harmless` holds.
    harmless_until: AtomicU64,
    /// One question to Postgres about a loss at a time.
    asking: tokio::sync::Mutex<()>,
    born: Instant,
    /// This replica wrote every missing epoch marker once.
    swept: AtomicBool,
    /// The slots whose missing marker this replica wrote so far: an attempt cut short
    /// (a timeout, an error) leaves them written, and the next one goes on from there.
    swept_slots: SlotSet,
    /// Until when (ms after `born`) a claim of this replica was last told a key is in
    /// flight for a slot's quarantine ([`RedisStore::in_quarantine`]).
    quarantined_until: AtomicU64,
    /// A sweep runs in the background (modes other than vouched claims).
    sweeping: Arc<AtomicBool>,
    /// Postgres' last answer that the markers are not recorded (`Ok`), or that it could
    /// not be asked, and when (ms after `born`): reused for [`ANSWER_KEPT`].
    answered: std::sync::Mutex<Option<(u64, Answer)>>,
}

/// Postgres' answer to "are the markers recorded?" other than yes: `Ok` not recorded,
/// `Err` it could not be asked.
type Answer = Result<(), Arc<StoreError>>;

/// How long Postgres' answer that the markers are not recorded serves a Redis-unreachable
/// claim, and its failure to answer any question: one question per second and process
/// while Redis cannot be reached, and claims queued behind a failing one fail at once.
const ANSWER_KEPT: Duration = Duration::from_secs(1);

impl Epochs {
    pub fn new(prefix: &str, quarantine: Duration) -> Self {
        Self {
            markers: SlotMarkers::new(prefix, "epoch"),
            quarantine,
            marking: Default::default(),
            written: Default::default(),
            kept_alone: Default::default(),
            harmless: (0..super::slots::SLOTS)
                .map(|_| Default::default())
                .collect(),
            harmless_until: Default::default(),
            asking: Default::default(),
            born: Instant::now(),
            swept: Default::default(),
            swept_slots: Default::default(),
            quarantined_until: Default::default(),
            sweeping: Default::default(),
            answered: Default::default(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.born.elapsed().as_millis() as u64
    }

    /// Postgres' answer of the last [`ANSWER_KEPT`], if any: `Some(Ok(()))` not
    /// recorded (only where `negative` may be reused), `Some(Err)` it could not be asked.
    fn recent(&self, negative: bool) -> Option<Answer> {
        let answered = self.answered.lock().unwrap_or_else(|p| p.into_inner());
        let (at, answer) = answered.as_ref()?;
        let fresh = self.now_ms() < at + ANSWER_KEPT.as_millis() as u64;
        (fresh && (negative || answer.is_err())).then(|| answer.clone())
    }

    fn remember(&self, answer: Answer) {
        let at = self.now_ms();
        *self.answered.lock().unwrap_or_else(|p| p.into_inner()) = Some((at, answer));
    }
}

/// Whether any claim of this deployment may have been kept by Redis alone: its epoch
/// markers recorded as written in Postgres (`idemgate_redis_epochs`), read afresh.
#[derive(Clone)]
pub struct KeptAloneCheck(
    pub  Arc<
        dyn Fn() -> futures_util::future::BoxFuture<'static, Result<bool, StoreError>>
            + Send
            + Sync,
    >,
);

/// A background sweep of the epoch markers in progress ([`RedisStore::sweep_slot`]).
pub struct Sweeping(Arc<AtomicBool>);

impl Drop for Sweeping {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl std::fmt::Debug for KeptAloneCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeptAloneCheck")
    }
}

impl RedisStore {
    /// Writes "0" into every slot's epoch marker that has none (`SET NX`): a slot of a
    /// new deployment has lost nothing. Concurrent with others' claims, which set a
    /// missing marker to their own clock first (those slots then count once). Resumes
    /// where an earlier call stopped: a call cut short (a timeout, an error) keeps the
    /// slots it wrote, so that a slow Redis is swept over several tries.
    pub async fn write_epoch_markers(&self) -> Result<(), StoreError> {
        let Some(epochs) = &self.inner.epochs else {
            return Ok(());
        };
        let swept = epochs.swept_slots.snapshot();
        for shard in self.shards() {
            let left: Bits = (shard.slots.iter().zip(&swept))
                .map(|(s, w)| s & !w)
                .collect();
            (self.mark_epochs(&left, "0", Some(&epochs.swept_slots))).await?;
        }
        epochs.swept.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Claims the one background sweep of this replica's epoch markers (other modes than
    /// vouched claims, which write them before serving); `None` while one runs. The
    /// returned flag is cleared when dropped.
    pub fn sweep_slot(&self) -> Option<Sweeping> {
        let flag = &self.inner.epochs.as_ref()?.sweeping;
        (!flag.swap(true, Ordering::AcqRel)).then(|| Sweeping(flag.clone()))
    }

    /// A claim was told a key is in flight for `remaining` of a slot's quarantine.
    pub(super) fn quarantining(&self, remaining: std::time::Duration) {
        if let Some(epochs) = &self.inner.epochs {
            let until = epochs.now_ms() + remaining.as_millis() as u64;
            epochs.quarantined_until.fetch_max(until, Ordering::Relaxed);
        }
    }

    /// Whether some slot's quarantine (as this replica's claims were told) is still on:
    /// an "in flight" may then be a key Redis lost whose answer Postgres holds.
    pub fn in_quarantine(&self) -> bool {
        (self.inner.epochs.as_ref())
            .is_some_and(|e| e.now_ms() < e.quarantined_until.load(Ordering::Relaxed))
    }

    /// Whether this replica wrote the epoch markers once ([`Self::write_epoch_markers`]).
    pub fn epochs_swept(&self) -> bool {
        (self.inner.epochs.as_ref()).map_or(true, |e| e.swept.load(Ordering::Relaxed))
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
            missing): where a claim may have been kept by redis alone, its absent keys \
            count as in flight for the quarantine",
        );
    }

    /// Sets the missing epoch markers of `slot`'s shard to `since` in the background
    /// (one marking per replica at a time), after logging `why`.
    fn mark_shard(&self, slot: u16, since: i64, why: &'static str) {
        let Some(epochs) = &self.inner.epochs else {
            return;
        };
        let Ok(one) = epochs.marking.clone().try_lock_owned() else {
            return;
        };
        let store = self.clone();
        tokio::spawn(async move {
            let _one = one;
            let shard = store.shard_of(slot);
            tracing::warn!(shard = %shard.name, "{why}");
            if let Err(e) = store
                .mark_epochs(&shard.slots, &since.to_string(), None)
                .await
            {
                tracing::warn!(error = %e, "could not mark the shard's epoch markers; each \
                    slot's first claim finds its own missing");
            }
        });
    }

    /// `SET NX` of the epoch markers of `slots` to `value`, 256 per pipeline on the
    /// slots' connection (a few writes, a few fsyncs, instead of one per key); the
    /// slots of every pipeline Redis answered go into `done`.
    async fn mark_epochs(
        &self,
        slots: &Bits,
        value: &str,
        done: Option<&SlotSet>,
    ) -> Result<(), StoreError> {
        let Some(epochs) = &self.inner.epochs else {
            return Ok(());
        };
        let slots = super::cold_slots::slots_of(slots);
        for chunk in slots.chunks(256) {
            let pipeline = self.inner.lanes.for_slot(chunk[0]).pipeline();
            for &slot in chunk {
                let key = epochs.markers.all()[usize::from(slot)].as_str();
                let nx = Some(fred::types::SetOptions::NX);
                let _: () = (pipeline.set(key, value, None, nx, false)).await?;
            }
            let _: Vec<Value> = pipeline.all().await?;
            if let Some(done) = done {
                chunk.iter().for_each(|&slot| done.insert(slot));
            }
        }
        Ok(())
    }

    /// Whether this deployment's epoch markers are known to be recorded (true without
    /// `[postgres]`: there are none).
    pub fn epochs_written(&self) -> bool {
        (self.inner.epochs.as_ref()).map_or(true, |e| e.written.load(Ordering::Relaxed))
    }

    /// This deployment's epoch markers are recorded, from now on.
    pub fn mark_epochs_written(&self) {
        if let Some(epochs) = &self.inner.epochs {
            epochs.written.store(true, Ordering::Relaxed);
        }
    }

    /// How to ask Postgres whether the deployment may have kept a claim in Redis alone
    /// (set once, by the stores).
    pub fn set_kept_alone_check(&self, check: KeptAloneCheck) {
        if let Some(epochs) = &self.inner.epochs {
            let _ = epochs.kept_alone.set(check);
        }
    }

    /// Whether a claim of this deployment may be held by Redis alone now: its markers
    /// are recorded (a replica with vouched claims ran), as this replica knows or
    /// Postgres says (`true` where it cannot tell). Then Postgres alone cannot decide a
    /// key it does not know while Redis is unreachable. Postgres' "not recorded" serves
    /// for [`ANSWER_KEPT`]; one question at a time.
    pub async fn may_hold_alone(&self) -> bool {
        if self.epochs_written() {
            return true;
        }
        let Some(epochs) = &self.inner.epochs else {
            return true;
        };
        let _one = epochs.asking.lock().await;
        self.epochs_written() || self.ask_recorded(true).await.unwrap_or(true)
    }

    /// Asks Postgres whether the markers are recorded (remembered once they are);
    /// `true` without `[postgres]`. A failure to ask, and with `negative` a "not
    /// recorded", of the last [`ANSWER_KEPT`] is answered again without asking.
    async fn ask_recorded(&self, negative: bool) -> Result<bool, StoreError> {
        let Some(epochs) = &self.inner.epochs else {
            return Ok(true);
        };
        let Some(check) = epochs.kept_alone.get() else {
            return Ok(true);
        };
        if let Some(answer) = epochs.recent(negative) {
            return answer.map(|()| false).map_err(StoreError::PgShared);
        }
        match (check.0)().await {
            Ok(true) => {
                self.mark_epochs_written();
                Ok(true)
            }
            Ok(false) => {
                epochs.remember(Ok(()));
                Ok(false)
            }
            Err(e) => {
                let e = Arc::new(e);
                epochs.remember(Err(e.clone()));
                Err(StoreError::PgShared(e))
            }
        }
    }

    /// Whether the loss that left `slot`'s epoch marker at `marker` may have lost a
    /// claim kept by Redis alone, as far as this replica knows or Postgres says now
    /// (an error where Postgres cannot be asked: nobody can tell). If not, it lost
    /// nothing Postgres does not arbitrate: its shard's markers up to `marker` mark no
    /// loss to wait out ([`RedisStore::harmless_upto`]). What Postgres says is final
    /// once true; false holds for the losses before the question (a claim is kept alone
    /// only once the markers are recorded: [`RedisStore::epochs_written`]). One
    /// question at a time.
    pub(super) async fn ask_kept_alone(&self, slot: u16, marker: i64) -> Result<bool, StoreError> {
        let Some(epochs) = &self.inner.epochs else {
            return Ok(true);
        };
        let _one = epochs.asking.lock().await;
        if self.epochs_written() {
            return Ok(true);
        }
        // Answered meanwhile for this loss (the value came from a question asked after
        // its marker was set).
        if self.harmless_upto(slot).is_some_and(|upto| upto >= marker) {
            return Ok(false);
        }
        // Asked afresh: "not recorded" holds only for the losses before the question.
        let kept = self.ask_recorded(false).await?;
        if !kept {
            self.loss_lost_nothing(slot, marker);
        }
        Ok(kept)
    }

    /// The moment (ms of Redis' clock) up to which an epoch marker of `slot` marks a
    /// loss known to have lost no claim kept by Redis alone; only until the markers are
    /// recorded, and for one quarantine after the question (later, such a marker is too
    /// old to hold a claim anyway).
    pub(super) fn harmless_upto(&self, slot: u16) -> Option<i64> {
        let epochs = self.inner.epochs.as_ref()?;
        let at = epochs.harmless[usize::from(slot)].load(Ordering::Relaxed);
        if at == 0 || self.epochs_written() {
            return None;
        }
        let now = epochs.born.elapsed().as_millis() as u64;
        (now < epochs.harmless_until.load(Ordering::Relaxed)).then_some(at)
    }

    /// Postgres showed that the loss that left `slot` with the epoch marker `marker`
    /// lost no claim kept by Redis alone: its shard's markers up to `marker` mark no
    /// loss to wait out, and those still missing are set to it.
    fn loss_lost_nothing(&self, slot: u16, marker: i64) {
        let Some(epochs) = &self.inner.epochs else {
            return;
        };
        let shard = self.shard_of(slot);
        for s in super::cold_slots::slots_of(&shard.slots) {
            epochs.harmless[usize::from(s)].fetch_max(marker, Ordering::Relaxed);
        }
        let until = epochs.born.elapsed() + epochs.quarantine;
        (epochs.harmless_until).fetch_max(until.as_millis() as u64, Ordering::Relaxed);
        self.mark_shard(
            slot,
            marker,
            "redis lost this shard's data (an epoch marker is \
            missing) before any claim was kept by redis alone: postgres arbitrates every \
            earlier claim, so its absent keys wait out no quarantine",
        );
    }
}
