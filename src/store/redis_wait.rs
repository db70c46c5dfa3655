//! `redis.wait_replicas`: a completion that the record's primary's replicas acknowledge
//! before the client is answered. The completion script and `WAIT n timeout` are
//! pipelined on one connection (WAIT counts the replicas that acknowledged the writes
//! of *its* connection), routed to the record's slot in a cluster, so the extra cost is
//! the replicas' acknowledgement, not a second round trip.
//!
//! These connections are a pool of their own: `WAIT` blocks the connection it runs on,
//! and with a replica down every `WAIT` lasts `redis.wait_timeout`; claims and replays
//! must not queue behind it. It has `redis.pool_size` connections, at least
//! [`MIN_WAIT_CONNECTIONS`]: completions waiting for replicas must not queue behind
//! each other on one connection either (with `pool_size = 1`).
//!
//! Limits (docs/guarantees.md, "Failover: what each mode guarantees"): `WAIT` is not synchronous
//! replication. A write acknowledged by `n` replicas survives the loss of the primary
//! when one of them is promoted (Redis Cluster and Sentinel prefer the most up-to-date
//! replica); a short `WAIT` is counted (`idemgate_redis_wait_short_total`), logged, and
//! the client is answered anyway. If the connection drops between the script and the
//! `WAIT`, fred re-sends the `WAIT` on a new connection, where it has no writes to wait
//! for and answers at once.

use bytes::Bytes;
use fred::error::Error as FredError;
use fred::prelude::{ClientLike, Pool, Value};
use fred::types::scripts::Script;
use fred::types::{ClusterHash, CustomCommand};

use super::redis_lanes::Lanes;
use crate::config::RedisConfig;

/// The fewest `WAIT` connections (the main pool's default size).
pub const MIN_WAIT_CONNECTIONS: usize = 4;

/// How many replicas acknowledged a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replicated {
    /// At least `redis.wait_replicas`.
    Acknowledged,
    /// Fewer, within `redis.wait_timeout`: the write is on the primary, maybe not on
    /// the replica a failover would promote.
    Short { acked: i64, wanted: i64 },
}

/// The dedicated connections and the `WAIT` arguments.
pub struct ReplicaWait {
    /// Split between the cluster's shards like the main pool ([`Lanes`]).
    lanes: Lanes,
    replicas: i64,
    timeout_ms: i64,
}

impl ReplicaWait {
    /// `None` when `redis.wait_replicas` is 0 (no `WAIT`, no extra connections).
    pub async fn connect(config: &RedisConfig) -> Result<Option<Self>, FredError> {
        if config.wait_replicas == 0 {
            return Ok(None);
        }
        let size = config.pool_size.max(MIN_WAIT_CONNECTIONS);
        let pool = super::redis_connect::build_pool(config, size)?;
        let lanes = Lanes::new(pool, config.mode == crate::config::RedisMode::Cluster);
        lanes.pool().connect();
        // Not awaited: the main pool's start-up already says whether Redis answers.
        Ok(Some(Self {
            lanes,
            replicas: i64::from(config.wait_replicas),
            timeout_ms: i64::try_from(config.wait_timeout.as_millis()).unwrap_or(i64::MAX),
        }))
    }

    /// Runs `script` (the completion script: its reply is returned as is) on `key` with
    /// `args`, then `WAIT replicas timeout`, pipelined on one connection. A `NOSCRIPT`
    /// (a restarted or promoted primary) loads the script and sends both again.
    pub async fn run(
        &self,
        script: &Script,
        key: &str,
        args: Vec<Value>,
    ) -> Result<(Value, Replicated), FredError> {
        // A connected client: one still reconnecting (to a primary the sentinels or the
        // cluster replaced) would fail the whole pipeline.
        let slot = fred::util::redis_keyslot(key.as_bytes());
        let client = self.lanes.for_slot(slot);
        let evalsha = CustomCommand::new_static("EVALSHA", ClusterHash::Custom(slot), false);
        let wait = CustomCommand::new_static("WAIT", ClusterHash::Custom(slot), true);
        let mut eval_args: Vec<Value> = Vec::with_capacity(args.len() + 3);
        eval_args.push(script.sha1().clone().into());
        eval_args.push(1.into());
        eval_args.push(Bytes::copy_from_slice(key.as_bytes()).into());
        eval_args.extend(args);
        for attempt in 0..2 {
            let pipeline = client.pipeline();
            let _: () = pipeline.custom(evalsha.clone(), eval_args.clone()).await?;
            let _: () = pipeline
                .custom(wait.clone(), vec![self.replicas, self.timeout_ms])
                .await?;
            let mut results: Vec<Result<Value, FredError>> = pipeline.try_all().await;
            let acked = results.pop();
            let reply = results.pop();
            match (reply, acked) {
                (Some(Err(e)), _) if attempt == 0 && e.details().starts_with("NOSCRIPT") => {
                    script.load(client).await?;
                }
                (Some(reply), Some(acked)) => {
                    let reply = reply?;
                    let acked = acked?.as_i64().unwrap_or(0);
                    let replicated = if acked >= self.replicas {
                        Replicated::Acknowledged
                    } else {
                        Replicated::Short {
                            acked,
                            wanted: self.replicas,
                        }
                    };
                    return Ok((reply, replicated));
                }
                _ => break,
            }
        }
        Err(FredError::new(
            fred::error::ErrorKind::Unknown,
            "completion and WAIT: no reply",
        ))
    }

    /// [`Self::run`], then a short `WAIT` counted and logged (the answer goes out
    /// anyway): the completion script's reply.
    pub async fn complete(
        &self,
        script: &Script,
        key: &str,
        args: Vec<Value>,
    ) -> Result<Value, FredError> {
        let (reply, replicated) = self.run(script, key, args).await?;
        if let Replicated::Short { acked, wanted } = replicated {
            crate::metrics::redis_wait_short();
            tracing::warn!(
                acked,
                wanted,
                "fewer replicas than redis.wait_replicas acknowledged a completion within \
                 redis.wait_timeout; answering anyway (stored on the primary only)"
            );
        }
        Ok(reply)
    }

    /// Closes the connections.
    pub async fn quit(&self) {
        let _ = self.lanes.pool().quit().await;
    }

    /// The `WAIT` connections (for the sentinel watch's check of where they point).
    pub fn pool(&self) -> &Pool {
        self.lanes.pool()
    }

    /// Makes new connections (after the sentinels named another primary).
    pub async fn reconnect(&self, within: std::time::Duration) {
        let _ = tokio::time::timeout(within, self.lanes.pool().force_reconnection()).await;
    }
}
