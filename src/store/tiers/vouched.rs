//! Vouched claims (`postgres.claims = "vouched"`) beyond the claim itself: the epoch
//! markers written once per deployment (by every mode with `[postgres]`, recorded by
//! vouched replicas), and a Redis that cannot be reached, which leaves Postgres to
//! answer only what it holds (it does not know the leases Redis kept).

use std::time::Duration;

use super::super::lease::Lease;
use super::super::StoreError;
use super::arbitrate::Ask;
use super::{Durable, Stores};
use crate::config::ClaimDurability;
use crate::idempotency::Claim;
use crate::metrics;
use crate::route::Route;

/// Where claims are kept now, for `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimPath {
    /// No `[postgres]`: Redis alone.
    RedisOnly,
    /// `claims = "redis"`: Redis decides, Postgres takes the claims Redis cannot.
    Redis,
    /// `claims = "write_through"`: a Postgres row per claim.
    WriteThrough,
    /// `claims = "vouched"`: each shard (as routed now) and why its claims are written
    /// through (`None`: Redis keeps them).
    Vouched(Vec<(String, Option<&'static str>)>),
}

impl Stores {
    /// Where claims are kept now ([`ClaimPath`]).
    pub fn claim_path(&self) -> ClaimPath {
        let Some(pg) = &self.0.postgres else {
            return ClaimPath::RedisOnly;
        };
        match (pg.durability, self.0.redis.claim_paths()) {
            (ClaimDurability::Vouched, Some(shards)) => ClaimPath::Vouched(shards),
            (ClaimDurability::RedisOnly, _) => ClaimPath::Redis,
            _ => ClaimPath::WriteThrough,
        }
    }

    /// Vouched claims: reads what each shard's primary runs (AOF, replicas).
    pub async fn probe_vouching(&self) {
        self.0.redis.probe_vouching().await;
    }

    /// Writes the epoch marker of every slot once per deployment (a key prefix Postgres
    /// has not seen), so that a new Redis is not taken for one that lost its data, and,
    /// with vouched claims, records them in Postgres before any claim is kept by Redis
    /// alone (until then every claim is written through, `verdict="unmarked"`); a
    /// replica of another mode learns here whether they are recorded. The
    /// record waits until a primary is seen to fsync every write: a deployment whose
    /// Redis never could keep a claim has none to lose, and a Redis of it restarted
    /// empty serves at once (a claim that finds a marker missing asks Postgres, finds
    /// nothing recorded, and waits out no quarantine). Tried for at most `within` at
    /// start-up, then by every probe until recorded (swept, in the other modes, where
    /// it runs in the background: neither start-up nor the probe waits for it).
    pub async fn write_epochs(&self, within: Duration) {
        let (Some(_), false) = (&self.0.postgres, self.0.redis.epochs_written()) else {
            return;
        };
        let keeps = self.0.redis.may_keep_claims();
        if !keeps && self.0.redis.epochs_swept() {
            return;
        }
        if self.0.redis.vouches() {
            return self.record_epochs(keeps, within).await;
        }
        let Some(sweeping) = self.0.redis.sweep_slot() else {
            return;
        };
        let stores = self.clone();
        tokio::spawn(async move {
            let _one = sweeping;
            stores.record_epochs(false, within).await;
        });
    }

    /// [`Self::write_epochs`]' work: sweep unless recorded, then record where `keeps`.
    async fn record_epochs(&self, keeps: bool, within: Duration) {
        let Some(pg) = &self.0.postgres else {
            return;
        };
        let prefix = self.0.redis.prefix();
        let write = async {
            if pg.store.epochs_written(prefix).await? {
                return Ok(true);
            }
            if !self.0.redis.epochs_swept() {
                self.0.redis.write_epoch_markers().await?;
            }
            if !keeps {
                return Ok(false);
            }
            pg.store.mark_epochs_written(prefix).await?;
            tracing::info!("redis epoch markers recorded: a new deployment of vouched claims");
            Ok::<bool, StoreError>(true)
        };
        match tokio::time::timeout(within, write).await {
            Ok(Ok(recorded)) => {
                if recorded {
                    self.0.redis.mark_epochs_written();
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot write the redis epoch markers \
                yet: retried by the probe (vouched claims are written through until they \
                are recorded)"),
            Err(_) => tracing::warn!(
                "the redis epoch markers took too long to write: retried by the probe \
                (vouched claims are written through until they are recorded)"
            ),
        }
    }

    /// Redis cannot be reached: it kept claims Postgres never saw, and their holders
    /// may still run. Postgres answers what it holds (a stored answer, a claim written
    /// through); a key it does not know is not taken (`cause`, a 503).
    pub(super) async fn answer_without_redis(
        &self,
        pg: &Durable,
        route: &Route,
        ask: Ask,
        cause: StoreError,
    ) -> Result<Claim<Lease>, StoreError> {
        match pg.lookups.lookup(ask.rec(route)).await? {
            Some(found) => {
                metrics::fallback("redis_unavailable_lookup");
                self.found_to_claim(found, &ask.fingerprint, ask.binding())
            }
            None => {
                metrics::fallback("rejected");
                Err(cause)
            }
        }
    }
}
