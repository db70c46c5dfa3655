//! The Rust side of `lua/claim.lua`: taking a record's lease (or learning what holds
//! it), re-sent while its slot migrates, released in the background when it fails.

use std::time::{Duration, Instant};

use bytes::Bytes;
use fred::prelude::{Client, ClientLike, Error as FredError, Value};

use super::acks::Ack;
use super::replicas::ReplicaWait;
use super::scripts;
use super::slots::Slotted;
use super::vouch::{Keeping, Vouched};
use super::{channel, decode_record_reply, fence_key, millis, Acquired, Record, RedisStore, Young};
use crate::idempotency::{Claim, Fingerprint, StoredRecord};
use crate::metrics;
use crate::store::StoreError;

/// What a claim sends, kept for a second run ([`RedisStore::claim`]).
#[derive(Clone, Copy)]
struct Claiming<'a> {
    key: &'a str,
    slot: u16,
    fingerprint: &'a Fingerprint,
    token: &'a str,
    lease: Duration,
    fence_ttl: Duration,
    keep_alone: bool,
    /// Vouched claims: what to do with a lapsed lease.
    on_lapsed: OnLapsed<'a>,
}

/// What a vouched claim does with a lapsed lease it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLapsed<'a> {
    /// Reports it ([`Acquired::lapsed`]) and writes nothing: its holder may have
    /// completed in Postgres alone.
    Ask,
    /// Takes it over (`Acquired::after_lapse`) if it is the lease of this holder (the
    /// one Postgres was asked about); reports another.
    TakeOver(&'a str),
}

/// What allows a vouched claim to be kept by Redis alone, known before it is sent.
#[derive(Clone, Copy)]
struct Keep {
    /// Sent once the deployment's epoch markers were recorded.
    marked: bool,
    /// Not a claim whose request the completer keeps in Postgres.
    keep_alone: bool,
}

impl RedisStore {
    /// Runs `lua/claim.lua`.
    ///
    /// KEYS: `[record key, fence key, warmth marker of the record's slot, epoch marker
    /// of the slot]` (the warmth marker where the mode reads it or the epoch marker is
    /// given, the epoch marker with `[postgres]`). ARGV: `[fingerprint (32 bytes), lock
    /// token, the record's ttl ms (the lease, plus with vouched claims how long the record
    /// outlives it), fence key ttl ms, vouch-after ms ("" where the warmth marker is
    /// not read), record layout ("string" or "hash", `redis.record_format`)]`, then with
    /// the epoch marker the quarantine (ms) and the moment up to which an epoch marker
    /// marks a loss known to have lost no claim kept alone
    /// ([`RedisStore::harmless_upto`], 0: none), and with vouched claims how long the
    /// record outlives its lease (ms): a lease that ran out with no completion is then
    /// taken over knowingly ([`Acquired::after_lapse`]). A `fence_ttl` of zero keeps no
    /// fence key: the reply's fence is then 0 (write-through claims, whose fencing token
    /// is Postgres'); vouched claims keep none either, their fence being Redis' clock.
    /// `keep_alone`: a vouched claim may be kept by Redis alone (not one whose request
    /// the completer keeps in its Postgres row). A vouched claim reports a lapsed lease
    /// ([`Acquired::lapsed`], nothing written) unless told to take it over (`lapsed`).
    /// Reply: `{"A", fence, marker age ms}` acquired with its fencing token (age 0
    /// without the marker), `{"P", token, ms}` a lapsed lease (vouched claims), `{"Y",
    /// remaining ms, marker[, 1]}` absent from a slot that
    /// lost its data lately (in flight, as far as anyone knows; 1: this claim found the
    /// marker missing and set it),
    /// `{"C", encoded response, remaining ms}` completed with this fingerprint,
    /// `{"I", remaining ms}` leased by another token (the record is then marked as
    /// waited for: its completion or release publishes), `{"M"}` another fingerprint;
    /// decoded by [`decode_record_reply`], the one decoder of record replies.
    ///
    /// A claim that fails may still have landed: its token is released in the
    /// background on the same connection (a compare-and-delete, harmless if it never
    /// ran) and the error returned, so the caller never forwards an unclaimed request.
    pub async fn claim(
        &self,
        Slotted { key, slot }: Slotted<'_>,
        fingerprint: &Fingerprint,
        token: &str,
        (lease, fence_ttl): (Duration, Duration),
        keep_alone: bool,
        on_lapsed: OnLapsed<'_>,
    ) -> Result<Claim<Acquired, StoredRecord>, StoreError> {
        let sent = Claiming {
            key,
            slot,
            fingerprint,
            token,
            lease,
            fence_ttl,
            keep_alone,
            on_lapsed,
        };
        let sent = &sent;
        match self.claim_once(sent).await? {
            Ok(claim) => Ok(claim),
            // Boxed: rare, and inline it would grow every claim's future.
            Err(young) => Box::pin(self.after_loss(sent, young)).await,
        }
    }

    /// A claim of a key absent from a slot that lost its data lately. If the deployment
    /// had kept no claim in Redis alone before (Postgres arbitrates every earlier one),
    /// the loss lost nothing to wait for: the claim runs again, told so. Else, or if
    /// the slot lost its data again meanwhile, the key is in flight for the quarantine.
    /// Where Postgres cannot be asked, nobody can tell: the claim fails (503).
    async fn after_loss(
        &self,
        sent: &Claiming<'_>,
        young: Young,
    ) -> Result<Claim<Acquired, StoredRecord>, StoreError> {
        match self.ask_kept_alone(sent.slot, young.marker).await {
            Ok(true) => return Ok(self.quarantined(sent.slot, young)),
            Ok(false) => {}
            Err(e) => {
                if young.found_missing {
                    self.lost_data(sent.slot, young.marker);
                }
                return Err(e);
            }
        }
        metrics::claim_vouch("young_unkept");
        match self.claim_once(sent).await? {
            Ok(claim) => Ok(claim),
            Err(again) => Ok(self.quarantined(sent.slot, again)),
        }
    }

    /// A key absent from a slot that lost its data: in flight for the quarantine, and
    /// the shard's other markers set to the same moment if this claim found it missing.
    fn quarantined(&self, slot: u16, young: Young) -> Claim<Acquired, StoredRecord> {
        metrics::claim_vouch("young");
        self.quarantining(young.remaining);
        if young.found_missing {
            self.lost_data(slot, young.marker);
        }
        Claim::InFlight {
            remaining: young.remaining,
        }
    }

    /// One run of the claim script; `Err` where the slot lost its data lately. A
    /// marker at or before [`RedisStore::harmless_upto`] is not a loss to wait out.
    async fn claim_once(
        &self,
        sent: &Claiming<'_>,
    ) -> Result<Result<Claim<Acquired, StoredRecord>, Young>, StoreError> {
        let Claiming {
            key,
            slot,
            keep_alone,
            ..
        } = *sent;
        let args = || self.claim_args(sent);
        let marker = self.vouch_after().is_some();
        // Before the claim is sent: a connection re-made or a slot map changed from here
        // on voids its round ([`super::acks`]).
        let since = self.inner.vouch.as_ref().map_or(0, |v| v.generation());
        // Kept alone only if sent once the markers were recorded: a loss the markers
        // cannot show lost nothing but claims Postgres arbitrates.
        let marked = self.epochs_written();
        let started = Instant::now();
        let client = self.inner.lanes.for_slot(slot);
        let reply = self.run_claim(client, (key, slot), marker, args).await;
        metrics::elapsed(&self.inner.ops.claim, started);
        let reply = match reply {
            Ok(v) => v,
            Err(e) => return Err(self.claim_failed(client, sent, e)),
        };
        match decode_record_reply("claim", reply)? {
            // Nothing written: nothing to vouch for.
            Record::Acquired(acquired) if acquired.lapsed.is_some() => {
                Ok(Ok(Claim::Acquired(acquired)))
            }
            Record::Acquired(mut acquired) => {
                if self.inner.vouch.is_some() {
                    let may = Keep { marked, keep_alone };
                    acquired.vouched = match self.kept(slot, since, may).await {
                        Ok(()) => Vouched::Kept,
                        Err(why) => Vouched::Unvouched(why),
                    };
                }
                Ok(Ok(Claim::Acquired(acquired)))
            }
            Record::Young(young) => Ok(Err(young)),
            Record::Known(claim) => Ok(Ok(claim)),
            Record::Absent => Err(StoreError::Protocol {
                script: "claim",
                detail: "absent is not a claim reply".into(),
            }),
        }
    }

    /// The claim script's ARGV for `sent` (see [`RedisStore::claim`]).
    fn claim_args(&self, sent: &Claiming<'_>) -> Vec<Value> {
        let Claiming {
            slot,
            fingerprint,
            token,
            lease,
            fence_ttl,
            on_lapsed,
            ..
        } = *sent;
        let mut args: Vec<Value> = vec![
            Bytes::copy_from_slice(fingerprint.as_bytes()).into(),
            token.into(),
            // Summed here: Lua would format the sum as a float for `SET ... PX`.
            millis(lease)
                .saturating_add(self.inner.vouch.as_ref().map_or(0, |v| millis(v.remember)))
                .into(),
            match (self.inner.vouch.is_some(), fence_ttl.is_zero()) {
                (true, _) => "clock".into(),
                (false, true) => 0.into(),
                (false, false) => millis(fence_ttl).into(),
            },
            self.vouch_after().map_or_else(|| "".into(), Value::from),
            self.inner.record_format.into(),
        ];
        if let Some(epochs) = &self.inner.epochs {
            args.push(millis(epochs.quarantine).into());
            args.push(self.harmless_upto(slot).unwrap_or(0).into());
        }
        if let Some(v) = &self.inner.vouch {
            args.push(millis(v.remember).into());
            args.push(match on_lapsed {
                OnLapsed::Ask => "1".into(),
                OnLapsed::TakeOver(holder) => holder.into(),
            });
        }
        args
    }

    /// Whether Redis keeps a vouched claim its primary just acquired in `slot`, sent at
    /// generation `since`: the primary fsyncs every write and, where it has replicas,
    /// one acknowledged the claim within `redis.replica_ack_timeout` (in a round:
    /// [`super::acks`]). Else why not. A round no replica acknowledged marks its shard
    /// (as a completion's short `WAIT` does): its claims take a Postgres row without
    /// waiting until the probe sees a replica acknowledge again.
    async fn kept(&self, slot: u16, since: u64, may: Keep) -> Result<(), &'static str> {
        let keeping = self.keeping(slot)?;
        if !may.marked {
            return Err("unmarked");
        }
        // Written through anyway: no round to wait for.
        if !may.keep_alone {
            return Err("completer");
        }
        match keeping {
            None => Ok(()),
            Some(wait) => {
                match self.acknowledged_in_round(slot, since).await {
                    Ack::Acked => return Ok(()),
                    Ack::Rerouted => return Err("rerouted"),
                    Ack::Short => {}
                }
                let shard = || {
                    let shard = self.shard_of(slot);
                    (shard.name, shard.slots)
                };
                wait.stop_waiting(shard, "no replica acknowledged a round of claims in time");
                Err("wait_short")
            }
        }
    }

    /// How a vouched claim of `slot` is kept now, as far as is known before it is
    /// sent: by the primary's fsync alone (`None`), by it and a replica's
    /// acknowledgement (the `WAIT` connections), or not (why: written through).
    fn keeping(&self, slot: u16) -> Result<Option<&ReplicaWait>, &'static str> {
        let keeping = (self.inner.vouch.as_ref()).map_or(Keeping::No, |v| v.of(slot));
        match keeping {
            Keeping::No => Err("no_fsync"),
            Keeping::Fsync => Ok(None),
            Keeping::FsyncAndReplica => match self.inner.replica_wait.as_ref() {
                Some(wait) if wait.waits(slot) => Ok(Some(wait)),
                _ => Err("wait_short"),
            },
        }
    }

    /// With vouched claims, each shard as fred routes it and why its claims are written
    /// through to Postgres now (`None`: Redis keeps them), for `/readyz`; `None` in the
    /// other modes.
    pub fn claim_paths(&self) -> Option<Vec<(String, Option<&'static str>)>> {
        self.inner.vouch.as_ref()?;
        let shards = self.shards().into_iter();
        // As `kept` decides: how the shard keeps claims, then whether the deployment's
        // epoch markers are recorded (until then every claim is written through).
        let unmarked = (!self.epochs_written()).then_some("unmarked");
        Some(
            shards
                .map(|s| (s.name, self.keeping(s.probe_slot).err().or(unmarked)))
                .collect(),
        )
    }

    /// KEYS of the claim script for a record key: with the slot's warmth marker when
    /// `marker` (where claims read it), and its epoch marker where `[postgres]` is
    /// configured (then with the warmth marker too, its place taken, read or not).
    /// `slot`: the record key's (computed once per claim).
    pub(super) fn claim_keys(&self, key: &str, slot: u16, marker: bool) -> Vec<String> {
        let mut keys = Vec::with_capacity(4);
        keys.extend([key.to_string(), fence_key(key)]);
        if marker || self.inner.epochs.is_some() {
            keys.push(self.inner.markers.for_slot(slot).to_string());
        }
        if let Some(epochs) = &self.inner.epochs {
            keys.push(epochs.markers.for_slot(slot).to_string());
        }
        keys
    }

    /// Sends the claim script on `client`, again while its slot migrates.
    async fn run_claim(
        &self,
        client: &Client,
        (key, slot): (&str, u16),
        marker: bool,
        args: impl Fn() -> Vec<Value>,
    ) -> Result<Value, FredError> {
        let script = &self.inner.claim;
        let call = || (self.claim_keys(key, slot, marker), args());
        let mut reply: Result<Value, FredError> = scripts::eval(script, client, call).await;
        // While its slot migrates between primaries (resharding), Redis answers
        // `-TRYAGAIN` to a script whose keys are split between the two nodes (the
        // marker already moved, the new record not there yet): the claim ran nowhere,
        // so it is sent again (the same token: safe to re-send) once the keys moved,
        // for up to ~1.6 s (a slot of many keys takes a while to move). The same goes
        // for a claim fred gave up redirecting: the owner of a `MIGRATING` slot answers
        // `ASK` for keys it lacks (every key of a new claim), and fred 10 re-sends an
        // asked command by its slot map, to the same owner, until its redirections run
        // out; every answer was a redirection, so the claim ran nowhere.
        for pause in [5, 20, 50, 100, 200, 400, 800] {
            match &reply {
                Err(e) if slot_migrating(e) => {
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    reply = scripts::eval(script, client, call).await;
                }
                _ => break,
            }
        }
        reply
    }

    /// A claim of unknown outcome: releases its token in the background on the same
    /// connection and says what the failure means.
    /// A takeover of a lapsed lease is ended as a lapsed lease instead (`lua/extend.lua`
    /// with a lease of no time), so that the next claim still knows the key may have run.
    fn claim_failed(&self, client: &Client, sent: &Claiming<'_>, e: FredError) -> StoreError {
        let takeover = matches!(sent.on_lapsed, OnLapsed::TakeOver(_));
        // A slow answer on a live connection is not an outage: the caller answers
        // 503 for this request but keeps claims in Redis. Only a lost connection
        // counts as Redis being unavailable (and may move claims elsewhere).
        let slow = e.kind() == &fred::error::ErrorKind::Timeout && client.is_connected();
        let script = match takeover {
            true => self.inner.extend.clone(),
            false => self.inner.release.clone(),
        };
        let (client, publish) = (client.clone(), self.inner.publish);
        let (key, token) = (sent.key.to_string(), sent.token.to_string());
        tokio::spawn(async move {
            let call = || {
                let args = match takeover {
                    true => vec![token.clone(), "0".to_string()],
                    false => vec![token.clone(), channel(&key), publish.to_string()],
                };
                (key.clone(), args)
            };
            let released: Result<i64, FredError> = scripts::eval(&script, &client, call).await;
            if let Err(e) = released {
                tracing::debug!(error = %e, "could not release a claim of unknown outcome");
            }
        });
        match e.kind() {
            fred::error::ErrorKind::Timeout if !slow => StoreError::Unavailable(e),
            _ => StoreError::from(e),
        }
    }
}

/// Whether Redis refused a command because its slot is being migrated and the
/// command's keys are split between the two nodes (`-TRYAGAIN`; fred has no kind for
/// it), or fred followed redirections until it gave up: retry after a moment, as the
/// cluster specification says.
fn slot_migrating(e: &FredError) -> bool {
    e.details().starts_with("TRYAGAIN")
        || (*e.kind() == fred::error::ErrorKind::Routing
            && e.details().starts_with("Too many redirections"))
}
