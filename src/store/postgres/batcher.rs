//! The one shape of Postgres' batched statements: callers queue jobs on a channel, and
//! one task gathers what is queued (up to `postgres.batch_max` jobs) into a round, runs
//! one statement for it and answers each caller. [`claim_rounds`](super::claim_rounds),
//! [`lookups`](super::lookups) and the [`writer`](super::writer) differ only in what a
//! round takes ([`Batch::pick`]) and how it runs and answers ([`Batch::run`]).
//!
//! A round does not wait for more jobs on a timer: it takes what is queued when the
//! task gets to it, so a lone request waits for no timer, and under load rounds grow by
//! themselves. Before it takes them, the callers woken together with the task (answers
//! that came in while the last statement ran) queue first
//! ([`crate::store::let_woken_callers_queue`]), so they share its round instead of
//! committing one of their own. A busy round (two jobs or more) of a batch whose callers
//! announce themselves ([`Batch::arrivals`]) also waits for the jobs announced when it
//! closed ([`Arrivals`]). The channel holds four rounds' worth; more callers wait to
//! queue.
//!
//! A failed statement fails every job of its round: [`shared`] is how its one error
//! reaches each caller.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::arrivals::{Arrivals, ARRIVAL_WAIT};
use crate::store::StoreError;

/// One kind of batched statement: what a round takes, and how it runs.
pub(super) trait Batch: Send + 'static {
    /// A queued request, carrying whatever answers its caller.
    type Job: Send + 'static;

    /// Splits `queued` (in order of arrival, jobs to try again first) into the next
    /// round, at most `max` jobs, and the rest, which keeps its order for later rounds.
    fn pick(&mut self, queued: Vec<Self::Job>, max: usize) -> (Vec<Self::Job>, Vec<Self::Job>);

    /// Runs one round's statement and answers its callers; returns the jobs to try
    /// again, which go ahead of everything still queued.
    fn run(&mut self, round: Vec<Self::Job>) -> impl Future<Output = Vec<Self::Job>> + Send;

    /// The jobs its callers announce before they queue, where they do: a busy round
    /// waits for them ([`Arrivals`]).
    fn arrivals(&self) -> Option<&Arrivals> {
        None
    }
}

/// Handle to a batching task: where its jobs queue, and how many statements it ran.
pub(super) struct Batcher<J> {
    jobs: mpsc::Sender<J>,
    statements: Arc<AtomicU64>,
}

impl<J> Clone for Batcher<J> {
    fn clone(&self) -> Self {
        Self {
            jobs: self.jobs.clone(),
            statements: self.statements.clone(),
        }
    }
}

impl<J: Send + 'static> Batcher<J> {
    /// Spawns the task that runs `batch` over rounds of up to `batch_max` queued jobs.
    pub(super) fn spawn<B: Batch<Job = J>>(batch: B, batch_max: usize) -> Self {
        let batch_max = batch_max.max(1);
        let (jobs, rx) = mpsc::channel(batch_max * 4);
        let statements = Arc::new(AtomicU64::new(0));
        tokio::spawn(gather(batch, rx, batch_max, statements.clone()));
        Self { jobs, statements }
    }

    /// Queues `job`, waiting for room; gives it back when the task is gone.
    pub(super) async fn send(&self, job: J) -> Result<(), J> {
        self.jobs.send(job).await.map_err(|e| e.0)
    }

    /// Statements run so far (each for one or more jobs).
    pub(super) fn statements(&self) -> u64 {
        self.statements.load(Ordering::Relaxed)
    }
}

/// The task: gathers what is queued into rounds until every handle is gone.
async fn gather<B: Batch>(
    mut batch: B,
    mut rx: mpsc::Receiver<B::Job>,
    batch_max: usize,
    count: Arc<AtomicU64>,
) {
    // Queued jobs in order of arrival, tried-again ones first.
    let mut carry: Vec<B::Job> = Vec::with_capacity(batch_max);
    loop {
        if carry.is_empty() && rx.recv_many(&mut carry, batch_max).await == 0 {
            return;
        }
        crate::store::let_woken_callers_queue().await;
        take_queued(&mut rx, &mut carry, batch_max);
        // Busy: the jobs on their way join this round rather than pay for their own.
        if let Some(arrivals) = batch.arrivals() {
            if (2..batch_max).contains(&carry.len()) && arrivals.wait(ARRIVAL_WAIT).await {
                take_queued(&mut rx, &mut carry, batch_max);
            }
        }
        let (round, rest) = batch.pick(std::mem::take(&mut carry), batch_max);
        carry = rest;
        if round.is_empty() {
            continue;
        }
        count.fetch_add(1, Ordering::Relaxed);
        let mut again = batch.run(round).await;
        again.append(&mut carry);
        carry = again;
    }
}

/// Moves what is queued into `carry`, up to `max` jobs in all.
fn take_queued<J>(rx: &mut mpsc::Receiver<J>, carry: &mut Vec<J>, max: usize) {
    while carry.len() < max {
        match rx.try_recv() {
            Ok(job) => carry.push(job),
            Err(_) => break,
        }
    }
}

/// `e` once for each of `n` requests that shared the statement it failed (itself when
/// alone): a timeout stays a timeout, anything else is [`StoreError::PgShared`].
pub(super) fn shared(e: StoreError, n: usize) -> Vec<StoreError> {
    if n == 1 {
        return vec![e];
    }
    let e = std::sync::Arc::new(e);
    (0..n)
        .map(|_| match *e {
            StoreError::PgTimeout => StoreError::PgTimeout,
            _ => StoreError::PgShared(e.clone()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use tokio::sync::Notify;

    /// The rounds a [`Gated`] batch ran, in order.
    type Rounds = Arc<Mutex<Vec<Vec<u32>>>>;

    /// Records each round; a round's statement runs until the test lets it answer.
    struct Gated {
        rounds: Rounds,
        answer: Arc<Notify>,
        arrivals: Option<Arc<Arrivals>>,
    }

    impl Gated {
        fn new(arrivals: Option<Arc<Arrivals>>) -> (Self, Rounds, Arc<Notify>) {
            let (rounds, answer) = (Arc::default(), Arc::new(Notify::new()));
            let batch = Self {
                rounds: Arc::clone(&rounds),
                answer: Arc::clone(&answer),
                arrivals,
            };
            (batch, rounds, answer)
        }
    }

    impl Batch for Gated {
        type Job = u32;

        fn pick(&mut self, mut queued: Vec<u32>, max: usize) -> (Vec<u32>, Vec<u32>) {
            let rest = queued.split_off(queued.len().min(max));
            (queued, rest)
        }

        async fn run(&mut self, round: Vec<u32>) -> Vec<u32> {
            self.rounds.lock().unwrap().push(round);
            self.answer.notified().await;
            Vec::new()
        }

        fn arrivals(&self) -> Option<&Arrivals> {
            self.arrivals.as_deref()
        }
    }

    async fn settle() {
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
    }

    /// The callers woken in the same turn as the task (their upstream answers came in
    /// while the last statement ran) share the round of the job that queued during it.
    #[tokio::test(flavor = "current_thread")]
    async fn callers_woken_with_the_task_share_its_next_round() {
        let (batch, rounds, answer) = Gated::new(None);
        let batcher = Batcher::spawn(batch, 16);
        batcher.send(1).await.unwrap();
        settle().await;
        // Round [1] runs; job 2 queues meanwhile, and four callers wait for their answers.
        batcher.send(2).await.unwrap();
        let answered = Arc::new(Notify::new());
        for job in 3..=6 {
            let (batcher, answered) = (batcher.clone(), answered.clone());
            tokio::spawn(async move {
                answered.notified().await;
                batcher.send(job).await.unwrap();
            });
        }
        settle().await;
        // Round [1]'s statement answers, and in the same turn the four callers' answers come
        // in: the task is woken first.
        answer.notify_one();
        answered.notify_waiters();
        settle().await;
        answer.notify_one();
        settle().await;
        assert_eq!(*rounds.lock().unwrap(), vec![vec![1], vec![2, 3, 4, 5, 6]]);
        assert_eq!(batcher.statements(), 2);
    }

    /// A busy round (jobs queued while the last statement ran) waits for the job
    /// announced before it closed, and takes it: one statement instead of two.
    #[tokio::test(start_paused = true)]
    async fn a_busy_round_waits_for_the_announced_job_and_takes_it() {
        let arrivals = Arc::new(Arrivals::default());
        let (batch, rounds, answer) = Gated::new(Some(arrivals.clone()));
        let batcher = Batcher::spawn(batch, 16);
        let started = tokio::time::Instant::now();
        batcher.send(1).await.unwrap();
        settle().await;
        batcher.send(2).await.unwrap();
        batcher.send(3).await.unwrap();
        let coming = arrivals.announce();
        answer.notify_one();
        settle().await;
        assert_eq!(*rounds.lock().unwrap(), vec![vec![1]], "[2, 3] waits for 4");
        batcher.send(4).await.unwrap();
        drop(coming);
        settle().await;
        assert_eq!(*rounds.lock().unwrap(), vec![vec![1], vec![2, 3, 4]]);
        assert!(
            started.elapsed() < ARRIVAL_WAIT,
            "woken by the arrival, not the limit"
        );
        answer.notify_one();
    }

    /// A round of one waits for nothing: a lone request's write goes at once, whatever
    /// is announced.
    #[tokio::test(start_paused = true)]
    async fn a_round_of_one_waits_for_no_announced_job() {
        let arrivals = Arc::new(Arrivals::default());
        let (batch, rounds, answer) = Gated::new(Some(arrivals.clone()));
        let batcher = Batcher::spawn(batch, 16);
        let coming = arrivals.announce();
        batcher.send(1).await.unwrap();
        settle().await;
        assert_eq!(*rounds.lock().unwrap(), vec![vec![1]]);
        drop(coming);
        answer.notify_one();
    }
}
