//! Write-through with group commit: completed records from many requests share one
//! multi-row statement per round, each request awaiting its own batch. When Postgres
//! fails, records move to a bounded retry queue that drains when it returns (and at
//! shutdown); overflow is dropped and counted, never silently. Batches are bounded in
//! records and bytes, and a record Postgres refuses is given up (counted, logged) rather
//! than blocking the records behind it ([`batches`]).

mod batches;

pub use batches::refused;

pub use batches::MAX_BATCH_BYTES;

pub use super::arrivals::Coming;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::arrivals::Arrivals;
use super::batcher::{Batch, Batcher};
use super::{CompletedRecord, PgStore};
use crate::metrics;
use crate::store::StoreError;

/// How a write-through ended for one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Committed.
    Written,
    /// Another record holds the key (first writer wins, or a lost lease): not written.
    Conflict,
    /// Postgres is failing: the record waits in the retry queue.
    Queued,
}

/// What a write came to. An error means its durable copy was given up: the error
/// Postgres refused it with ([`StoreError::Pg`]), or [`StoreError::QueueFull`].
type Outcome = Result<WriteOutcome, StoreError>;

struct Job {
    record: CompletedRecord,
    done: oneshot::Sender<Outcome>,
}

/// What the writer's tasks share: the store, the retry queue and the counters.
struct Shared {
    pg: PgStore,
    batch_max: usize,
    retry: Mutex<VecDeque<CompletedRecord>>,
    capacity: usize,
    /// Most bytes the retry queue may hold (`postgres.retry_queue_bytes`): a count alone
    /// lets large responses grow it past what the process may use.
    capacity_bytes: u64,
    /// Bytes in the retry queue; changed only under its lock.
    queued_bytes: AtomicU64,
    /// Set while Postgres fails: new records go straight to the retry queue.
    degraded: AtomicBool,
    dropped: AtomicU64,
    failures: AtomicU64,
    /// One flusher of the retry queue at a time (the retry task, or shutdown's drain).
    flushing: tokio::sync::Mutex<()>,
    /// Records announced before they are written ([`Writer::coming`]).
    arrivals: Arc<Arrivals>,
}

/// Handle to the writer tasks. Cheap to clone.
#[derive(Clone)]
pub struct Writer {
    batcher: Batcher<Job>,
    shared: Arc<Shared>,
}

impl Writer {
    /// Spawns the group-commit task and the retry task.
    pub fn spawn(pg: PgStore, batch_max: usize, capacity: usize, capacity_bytes: u64) -> Self {
        let shared = Arc::new(Shared {
            pg,
            batch_max,
            retry: Mutex::new(VecDeque::new()),
            capacity,
            capacity_bytes,
            queued_bytes: AtomicU64::new(0),
            degraded: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            flushing: tokio::sync::Mutex::new(()),
            arrivals: Arc::default(),
        });
        tokio::spawn(shared.clone().retry_loop());
        Self {
            batcher: Batcher::spawn(GroupCommit(shared.clone()), batch_max),
            shared,
        }
    }

    /// Writes one record, sharing a statement with whatever else is pending. An error
    /// means its durable copy was given up: Postgres refused it, or the queue was full.
    pub async fn write(&self, record: CompletedRecord) -> Outcome {
        self.write_coming(record, None).await
    }

    /// Announces a record that [`Writer::write_coming`] will write after a step of its
    /// own (the completion in Redis), so that a busy round waits for it. Dropping the
    /// announcement says it is not coming.
    pub fn coming(&self) -> Coming {
        self.shared.arrivals.announce()
    }

    /// [`Writer::write`] of a record announced by `coming`, which ends once the record
    /// is queued.
    pub async fn write_coming(&self, record: CompletedRecord, coming: Option<Coming>) -> Outcome {
        if self.shared.degraded.load(Ordering::Relaxed) {
            return self.shared.enqueue(record);
        }
        let (done, wait) = oneshot::channel();
        let sent = self.batcher.send(Job { record, done }).await;
        drop(coming);
        if let Err(job) = sent {
            return self.shared.enqueue(job.record);
        }
        wait.await
            .unwrap_or_else(|_| Err(StoreError::TaskEnded("write-through")))
    }

    /// Bytes waiting for Postgres in the retry queue.
    pub fn queued_bytes(&self) -> u64 {
        self.shared.queued_bytes.load(Ordering::Relaxed)
    }

    /// Records waiting for Postgres.
    pub fn queue_depth(&self) -> usize {
        self.shared.queue_depth()
    }

    /// Records given up: the retry queue was full, or Postgres refused them.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Failed write-through statements.
    pub fn failures(&self) -> u64 {
        self.shared.failures.load(Ordering::Relaxed)
    }

    /// Tries to empty the retry queue before `deadline`; true when empty.
    pub async fn drain(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while self.queue_depth() > 0 && Instant::now() < deadline {
            if self.shared.flush_retry_batch().await.is_err() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        let left = self.queue_depth();
        if left > 0 {
            tracing::error!(
                records = left,
                "postgres did not come back before shutdown; \
                these stored responses exist only in redis"
            );
        }
        left == 0
    }
}

impl Shared {
    /// Records waiting for Postgres.
    fn queue_depth(&self) -> usize {
        self.retry.lock().map_or(0, |q| q.len())
    }

    fn enqueue(&self, record: CompletedRecord) -> Outcome {
        let mut queue = self.retry.lock().unwrap_or_else(|p| p.into_inner());
        let size = queued_size(&record);
        let bytes = self.queued_bytes.load(Ordering::Relaxed);
        if queue.len() >= self.capacity || bytes + size > self.capacity_bytes {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            metrics::write_dropped(metrics::DropReason::QueueFull);
            tracing::error!(key_hash = %record.id.short(), "write-through retry queue full; \
                dropping the durable copy of a stored response");
            return Err(StoreError::QueueFull);
        }
        queue.push_back(record);
        self.queued_bytes.store(bytes + size, Ordering::Relaxed);
        metrics::queue_depth(queue.len());
        Ok(WriteOutcome::Queued)
    }

    async fn retry_loop(self: Arc<Self>) {
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            if self.queue_depth() == 0 {
                self.degraded.store(false, Ordering::Relaxed);
                continue;
            }
            while self.queue_depth() > 0 {
                if self.flush_retry_batch().await.is_err() {
                    break;
                }
            }
            if self.queue_depth() == 0 && self.degraded.swap(false, Ordering::Relaxed) {
                tracing::info!("postgres is back; write-through queue drained");
            }
        }
    }

    /// Writes the oldest queued records; removes them once settled (written, in
    /// conflict, or refused and given up).
    async fn flush_retry_batch(&self) -> Result<(), StoreError> {
        let _flushing = self.flushing.lock().await;
        let batch: Vec<CompletedRecord> = {
            let queue = self.retry.lock().unwrap_or_else(|p| p.into_inner());
            let taken = batches::pick(queue.iter().take(self.batch_max), self.batch_max);
            let n = taken.iter().take_while(|t| **t).count();
            queue.iter().take(n).cloned().collect()
        };
        if batch.is_empty() {
            return Ok(());
        }
        let settled = self.settle(&batch).await;
        for (record, outcome) in batch.iter().zip(&settled.each) {
            if let Ok(false) = outcome {
                // Its lease ran out while Postgres was away and another request took
                // the key: that execution's record stands. Never silently.
                metrics::tier_disagreement("queued_write_lost_to_another_record");
                tracing::warn!(key_hash = %record.id.short(), "a queued durable copy lost to \
                    another record for its key (taken over while postgres was away)");
            }
        }
        let mut queue = self.retry.lock().unwrap_or_else(|p| p.into_inner());
        let done = settled.each.len().min(queue.len());
        let freed: u64 = queue.drain(..done).map(|r| queued_size(&r)).sum();
        self.queued_bytes.fetch_sub(freed, Ordering::Relaxed);
        metrics::queue_depth(queue.len());
        settled.failing.map_or(Ok(()), Err)
    }
}

/// The group-commit rounds: one multi-row statement per round ([`Shared::settle`]).
struct GroupCommit(Arc<Shared>);

impl Batch for GroupCommit {
    type Job = Job;

    /// Up to `max` records and [`MAX_BATCH_BYTES`], each key once ([`batches::pick`]).
    fn pick(&mut self, mut queued: Vec<Job>, max: usize) -> (Vec<Job>, Vec<Job>) {
        let mut taken = batches::pick(queued.iter().map(|j| &j.record), max).into_iter();
        queued
            .drain(..)
            .partition(|_| taken.next().unwrap_or(false))
    }

    /// Writes the round and answers each record; when Postgres fails, the records it
    /// did not settle go to the retry queue (and new ones go there directly).
    async fn run(&mut self, batch: Vec<Job>) -> Vec<Job> {
        let shared = &self.0;
        let records: Vec<CompletedRecord> = batch.iter().map(|j| j.record.clone()).collect();
        let settled = shared.settle(&records).await;
        let mut jobs = batch.into_iter();
        // Settled first: zip must not take a job it has no settlement for.
        for (each, job) in settled.each.into_iter().zip(jobs.by_ref()) {
            let outcome = each.map(|written| match written {
                true => WriteOutcome::Written,
                false => WriteOutcome::Conflict,
            });
            let _ = job.done.send(outcome);
        }
        if let Some(e) = settled.failing {
            if !shared.degraded.swap(true, Ordering::Relaxed) {
                tracing::error!(error = %e, "write-through to postgres failing; \
                    queueing records until it returns");
            }
            for job in jobs {
                let outcome = shared.enqueue(job.record);
                let _ = job.done.send(outcome);
            }
        }
        Vec::new()
    }

    fn arrivals(&self) -> Option<&Arrivals> {
        Some(&self.0.arrivals)
    }
}

/// What a queued record holds in memory, for `postgres.retry_queue_bytes`.
fn queued_size(record: &CompletedRecord) -> u64 {
    let fixed = std::mem::size_of::<CompletedRecord>() + record.route.len() + record.token.len();
    (fixed + record.headers.len() + record.body.len()) as u64
}
