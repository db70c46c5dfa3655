//! The lease holder's heartbeat: while the holder works on a record (the upstream call,
//! then storing its response), the lease is pushed out by `lock_ttl` every third of
//! `lock_ttl`, so it cannot lapse under a live holder and let a duplicate run.
//!
//! Storing is covered too ([`super::Lease::complete`]): completing in Redis may take
//! several attempts (three, each bounded by `redis.command_timeout`; with Redis as the only
//! store, as long as the lease lasts: see `Held::runs_out_at`) and then the
//! write-through to Postgres (bounded by `postgres.statement_timeout`, which may exceed
//! `lock_ttl`). Once Redis holds the completion the beats answer "not held" (nothing to
//! extend: duplicates replay); until then they keep the lease, so a duplicate finds the
//! key in flight. If this process dies, the beats stop and the lease ends.

use std::future::Future;
use std::pin::Pin;

use super::lease::Held;

/// What the holder does while its lease beats (for the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The upstream call: a lost lease is worth a warning.
    Upstream,
    /// Storing the response: "not held" is expected once Redis has it.
    Settle,
}

impl Held {
    /// Drives `work` while extending the lease every third of `lock_ttl`.
    ///
    /// `work` comes pinned by the caller: an async fn keeps a future it takes by value
    /// twice (the argument, and the local it is pinned in), which doubled the size of
    /// every request's future (the completion's is ~8 KiB, most of it fred's) and so
    /// the bytes copied each time that future moves.
    pub async fn heartbeat<F: Future>(&self, mut work: Pin<&mut F>, phase: Phase) -> F::Output {
        let every = self.lock_ttl / 3;
        // A pinned `Sleep`, not an `Interval` (which boxes one): nothing allocated on
        // this per-request path.
        let beat = tokio::time::sleep(every);
        tokio::pin!(beat);
        let mut lost = false;
        loop {
            tokio::select! {
                answer = &mut work => return answer,
                () = &mut beat => {
                    // Boxed: a beat is rare (slow requests only), and inline the extension
                    // would grow the future of every upstream call and completion.
                    match Box::pin(self.extend(self.lock_ttl)).await {
                        Ok(true) => {}
                        Ok(false) if !lost && phase == Phase::Upstream => {
                            lost = true;
                            tracing::warn!("lease lost during the upstream call; its result will not overwrite");
                        }
                        Ok(false) => lost = true,
                        Err(e) if phase == Phase::Upstream => tracing::warn!(error = %e,
                            "could not extend the lease; retrying at the next beat"),
                        Err(e) => tracing::debug!(error = %e,
                            "could not extend the lease while storing; retrying at the next beat"),
                    }
                    beat.as_mut().reset(tokio::time::Instant::now() + every);
                }
            }
        }
    }
}
