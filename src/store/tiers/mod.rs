//! Redis and Postgres together: the claim path across tiers, write-through of
//! completions, the Redis circuit breaker and its fallback policies, and the
//! background probe and reaper tasks. One file per phase of a key's life:
//! `arbitrate` (the claim: Redis or Postgres, the cold-Redis lookup, with `warmth`
//! deciding when Redis vouches for a key), `fallback` (the claim while Redis is
//! unavailable), `wait` (duplicates waiting for an in-flight holder), `find` (records
//! found without claiming them), `settle` (extend, complete, release), `live` (a running answer's stream), `attempts`
//! (the completer's attempts), `replays` (the replay cache), `admin` (inspect and
//! invalidate), `readiness` (health, the write-through queue, the drain at shutdown) and
//! `maintenance` (the probe and the reaper).
//!
//! * A claim goes to Redis unless its breaker is open. An acquired Redis claim is
//!   checked against Postgres first (cold-Redis lookup, or a Postgres claim with
//!   `postgres.claims = "write_through"`), so a key Redis forgot is replayed, not re-run.
//! * While Redis fails, `on_redis_unavailable` decides: claim in Postgres with the same
//!   semantics, answer 503, or forward without idempotency.

mod admin;
mod arbitrate;
mod attempts;
mod fallback;
mod find;
mod lapse;
mod live;
mod maintenance;
mod readiness;
mod replays;
mod settle;
mod vouched;
mod wait;
mod warmth;

pub use arbitrate::Resendable;
pub use live::{LiveWriter, Read};
pub use readiness::Health;
pub use vouched::ClaimPath;
pub use wait::{Joined, Waited};

use std::sync::Arc;

use super::memory::ReplayCache;
use super::postgres::claim_rounds::ClaimRounds;
use super::postgres::lookups::Lookups;
use super::postgres::writer::Writer;
use super::redis::breaker::Breaker;
use super::redis::epochs::KeptAloneCheck;
use super::redis::sentinel_watch::SentinelWatch;
use super::redis::waiters::Waiters;
use super::{PgStore, RedisStore};
use crate::config::{ClaimDurability, Config, RedisFill};
use crate::idempotency::{Keyring, Sealing};
use warmth::Warmth;

/// The durable tier, when `[postgres]` is configured.
pub struct Durable {
    pub store: PgStore,
    pub writer: Writer,
    /// Cold-Redis lookups, batched.
    pub lookups: Lookups,
    /// Claims in Postgres (`claims = "write_through"`, the Redis fallback), batched.
    pub claims: ClaimRounds,
    pub durability: ClaimDurability,
    /// When Redis gets its copy of a completed record (`postgres.redis_fill`).
    pub redis_fill: RedisFill,
}

impl Durable {
    /// Redis is filled on replay (`redis_fill = "on_replay"`, which the configuration
    /// takes with write-through and vouched claims): a completion writes Postgres only
    /// and leaves the holder's Redis lease standing ([`Durable::confirms_in_flight`]).
    pub fn fills_on_replay(&self) -> bool {
        self.redis_fill == RedisFill::OnReplay
    }

    /// A Redis "in flight" is confirmed in Postgres, whatever this replica's own
    /// `redis_fill`: a replica that fills on replay (the default with vouched claims; a
    /// fleet switching replica by replica) leaves its lease standing after it completed,
    /// and so does a holder whose Redis completion failed. Every mode that writes
    /// completions to Postgres does; the cost is a Postgres read per duplicate that meets
    /// a key in flight.
    pub fn confirms_in_flight(&self) -> bool {
        match self.durability {
            ClaimDurability::WriteThrough | ClaimDurability::Vouched => true,
            ClaimDurability::RedisOnly => false,
        }
    }

    /// Postgres decides who holds every key (write-through claims): a live lease
    /// anywhere has its row there.
    pub fn decides_holders(&self) -> bool {
        self.durability == ClaimDurability::WriteThrough
    }

    /// A completed record may be decided in Postgres alone while Redis keeps its
    /// holder's lease (any replica of the fleet filling on replay): an admin
    /// invalidation that deleted Postgres' record deletes that lease too. (Vouched
    /// claims ask about a lapsed lease whatever this says: `lua/claim.lua`, "P".)
    pub fn completes_in_postgres(&self) -> bool {
        self.durability != ClaimDurability::RedisOnly
    }
}

/// Both tiers and their health state. Cheap to clone.
#[derive(Clone)]
pub struct Stores(Arc<Inner>);

/// The state behind [`Stores`]: reached only by the tiers' own modules (claim, settle,
/// records, maintenance); everything else goes through `Stores`' methods.
struct Inner {
    redis: RedisStore,
    postgres: Option<Durable>,
    breaker: Breaker,
    /// `redis.mode = "sentinel"`: the primary a majority of the sentinels names,
    /// asked by the probe ([`maintenance`]).
    sentinels: Option<SentinelWatch>,
    /// A shard whose claims all time out for this long is treated as lost (twice the
    /// command timeout, fred's own unresponsive-connection limit).
    silent_after: std::time::Duration,
    warmth: Warmth,
    /// Present when some route lets duplicates wait, or the replay cache is on.
    waiters: Option<Arc<Waiters>>,
    /// Completed records this replica has seen (`replay_cache`); read, filled and
    /// invalidated only through `records`.
    cache: Option<Arc<ReplayCache>>,
    /// Seals responses before either tier stores them and opens what they return
    /// (`[encryption]`); the replay cache holds opened responses (memory only).
    sealing: Sealing,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores").finish_non_exhaustive()
    }
}

impl Stores {
    pub fn new(
        config: &Config,
        redis: RedisStore,
        postgres: Option<Durable>,
        waiters: Option<Arc<Waiters>>,
        cache: Option<Arc<ReplayCache>>,
    ) -> Self {
        let lookup = config.postgres.as_ref().map(|p| p.lookup_on_miss);
        // Claims read the warmth marker only where its verdict is used: a Redis claim
        // that Postgres may know better (`when_cold` skips the lookup when warm;
        // `always` lets a warm claim stand when the lookup fails). Not with Redis
        // alone (nothing to look up), nor with write-through claims (Postgres decides).
        let reads_marker =
            (config.postgres.as_ref()).is_some_and(|p| p.claims != ClaimDurability::WriteThrough);
        redis.set_vouch_after(reads_marker.then(|| config.longest_ttl()));
        if let Some(pg) = &postgres {
            let (store, prefix) = (pg.store.clone(), Arc::<str>::from(redis.prefix()));
            redis.set_kept_alone_check(KeptAloneCheck(Arc::new(move || {
                let (store, prefix) = (store.clone(), prefix.clone());
                Box::pin(async move { store.epochs_written(&prefix).await })
            })));
        }
        let sentinels = SentinelWatch::connect(&config.redis).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot watch the sentinels; following fred's choice only");
            None
        });
        Self(Arc::new(Inner {
            sentinels,
            redis,
            postgres,
            waiters,
            cache,
            sealing: Sealing::new(config.encryption.as_ref().map(Keyring::new)),
            breaker: Breaker::default(),
            silent_after: config.redis.command_timeout * 2,
            warmth: Warmth::new(
                lookup.unwrap_or(crate::config::LookupOnMiss::Always),
                config.longest_ttl(),
            ),
        }))
    }
}
