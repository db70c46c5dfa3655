//! Claims in Postgres, batched: the write-through claims (and the claims of the Redis
//! fallback) of concurrent requests share one claim statement per round, the way
//! [`writer`](super::writer) shares one statement among completions and
//! [`lookups`](super::lookups) among cold-Redis lookups.
//!
//! Batching changes no outcome: a round is [`PgStore::claim_round`], which decides each
//! row as a claim of its own would. A round holds each key once; a second claim of a key
//! already in the round waits for the next one, which sees the first's lease (in
//! flight, or a mismatch), so of two claims of one record only one acquires. A claim
//! whose key was held by a holder gone by the time it was read is tried again in the
//! next round, three rounds at most, as a claim alone would.
//!
//! A caller that went away (its answer can no longer be delivered) leaves nothing
//! behind: not yet claimed, it is dropped from the round; claimed, its lease is released.

use std::time::Duration;

use tokio::sync::oneshot;

use super::batcher::{Batch, Batcher};
use super::claim_asks::ClaimAsk;
use super::leases::CLAIM_TRIES;
use super::{PgClaim, PgStore, RecordRef};
use crate::idempotency::{Fingerprint, Release};
use crate::store::StoreError;

type Answer = Result<PgClaim, StoreError>;

struct Job {
    ask: ClaimAsk,
    /// Rounds this claim has been in.
    tries: u8,
    done: oneshot::Sender<Answer>,
}

/// Handle to the claim task. Cheap to clone.
#[derive(Clone)]
pub struct ClaimRounds {
    batcher: Batcher<Job>,
}

impl ClaimRounds {
    /// Spawns the task that runs up to `batch_max` queued claims per round (and queues
    /// at most four rounds' worth; more callers wait to queue).
    pub fn spawn(pg: PgStore, batch_max: usize) -> Self {
        Self {
            batcher: Batcher::spawn(Rounds { pg }, batch_max),
        }
    }

    /// Claims `rec` with `token` for `lease` (see [`PgStore::claim`]), sharing a
    /// statement with whatever else is queued.
    pub async fn claim(
        &self,
        rec: RecordRef<'_>,
        fingerprint: &Fingerprint,
        token: &str,
        lease: Duration,
    ) -> Answer {
        (self.claim_ask(ClaimAsk::new(rec, fingerprint, token, lease))).await
    }

    /// [`ClaimRounds::claim`] for `ask`, which may keep a request with its lease.
    pub async fn claim_ask(&self, ask: ClaimAsk) -> Answer {
        let ended = || StoreError::TaskEnded("claim");
        let (done, answer) = oneshot::channel();
        let job = Job {
            ask,
            tries: 0,
            done,
        };
        self.batcher.send(job).await.map_err(|_| ended())?;
        answer.await.unwrap_or_else(|_| Err(ended()))
    }

    /// Claim statements run so far (each claims one or more keys).
    pub fn statements(&self) -> u64 {
        self.batcher.statements()
    }
}

/// The claim rounds: one [`PgStore::claim_round`] per round.
struct Rounds {
    pg: PgStore,
}

impl Batch for Rounds {
    type Job = Job;

    /// The next round out of `queued`, in order: up to `max` claims, each key once. The
    /// rest (a later claim of a key in the round, and whatever is past `max`) keeps its
    /// order. Claims nobody waits for any more are dropped: nothing is claimed for them.
    fn pick(&mut self, mut queued: Vec<Job>, max: usize) -> (Vec<Job>, Vec<Job>) {
        queued.retain(|job| !job.done.is_closed());
        let mut keys = std::collections::HashSet::with_capacity(queued.len());
        let (mut round, mut rest) = (Vec::with_capacity(queued.len().min(max)), Vec::new());
        for job in queued {
            if round.len() < max && keys.insert((*job.ask.scope.as_bytes(), *job.ask.id.as_bytes()))
            {
                round.push(job);
            } else {
                rest.push(job);
            }
        }
        (round, rest)
    }

    /// Runs the round and answers each claim; a claim that met a row expiring under it
    /// goes again (ahead of later claims of the same keys, as a claim alone would be),
    /// [`CLAIM_TRIES`] rounds at most.
    async fn run(&mut self, round: Vec<Job>) -> Vec<Job> {
        let pg = &self.pg;
        let asks: Vec<&ClaimAsk> = round.iter().map(|job| &job.ask).collect();
        let outcomes = pg.claim_round(&asks).await;
        let mut again = Vec::new();
        for (mut job, outcome) in round.into_iter().zip(outcomes) {
            match outcome {
                Ok(Some(claim)) => deliver(pg, job, Ok(claim)),
                Ok(None) if job.tries + 1 < CLAIM_TRIES => {
                    job.tries += 1;
                    again.push(job);
                }
                Ok(None) => deliver(pg, job, Err(StoreError::ClaimRaced)),
                Err(e) => deliver(pg, job, Err(e)),
            }
        }
        again
    }
}

/// Answers `job`'s caller; an acquired lease nobody is left to settle is released.
fn deliver(pg: &PgStore, job: Job, answer: Answer) {
    let Err(Ok(PgClaim::Acquired { .. })) = job.done.send(answer) else {
        return;
    };
    let (pg, ask) = (pg.clone(), job.ask);
    tokio::spawn(async move {
        match pg.release(ask.rec(), &ask.token).await {
            Ok(Release::Released) => tracing::debug!(key_hash = %ask.id.short(),
                "released a postgres claim whose caller went away"),
            Ok(Release::NotHeld) => {}
            Err(e) => tracing::warn!(key_hash = %ask.id.short(), error = %e,
                "could not release a postgres claim whose caller went away; \
                it ends when its lease expires"),
        }
    });
}
