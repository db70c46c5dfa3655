//! The Postgres tier: write-through and cold-Redis fallback, claims in Postgres, the
//! writer, HOT updates, migrations and the reaper, stalled and silent servers, libpq
//! high availability, where Redis and Postgres meet (split authority, tier edges),
//! Redis filled on replay, fleets whose replicas run different claim modes, completions
//! of claims Redis held alone, and how the sessions plan their statements.

mod claims;
mod durability;
mod failover;
mod fill;
mod hot;
mod mixed_modes;
mod new_records;
mod ops;
mod plans;
mod silent;
mod split_authority;
mod tier_edges;
mod timeouts;
mod vouched;
mod vouched_fill;
mod vouched_path;
mod vouched_rounds;
mod vouched_writeback;
mod writer;

/// Makes `redis` provably warm: the warmth marker of every slot says it has held
/// every write for two days, longer than any ttl here.
pub async fn warm_up(redis: &crate::support::RedisServer) {
    let two_days = std::time::Duration::from_secs(48 * 3600);
    crate::support::redis::backdate_markers(&redis.url(), &[(0, 16383)], two_days).await;
}

/// Waits (10 s at most) until the gateway has written every slot's epoch marker (its
/// background sweep at start-up, which asks Postgres first): until then a claim that
/// finds its slot's marker missing asks Postgres whether Redis lost a claim, and fails
/// closed while Postgres cannot answer.
pub async fn until_epochs_swept(redis: &crate::support::RedisServer) {
    let script = "return #redis.call('KEYS', ARGV[1])";
    let swept = crate::support::eventually(std::time::Duration::from_secs(10), async || {
        let count = redis.cli(&["EVAL", script, "0", "idemgate:epoch:*"]);
        count.trim() == "16384"
    })
    .await;
    assert!(swept, "the gateway wrote every epoch marker");
}

/// Runs `statements` one at a time (`ALTER SYSTEM` runs outside a transaction).
pub async fn sql(pg: &crate::support::PgServer, statements: &[&str]) {
    let client = pg.client().await;
    for statement in statements {
        client.batch_execute(statement).await.unwrap();
    }
}

/// Turns a server read-only, as a demoted primary is (with [`sql`]).
pub const READ_ONLY: &[&str] = &[
    "ALTER SYSTEM SET default_transaction_read_only = on",
    "SELECT pg_reload_conf()",
];
/// Makes a read-only server writable again, as a promoted one is (with [`sql`]).
pub const WRITABLE: &[&str] = &[
    "ALTER SYSTEM RESET default_transaction_read_only",
    "SELECT pg_reload_conf()",
];
