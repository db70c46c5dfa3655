//! What `/readyz` says of vouched claims (`claim_path`) as what they rely on comes and
//! goes: a Redis that does not fsync every write writes them through (`no_fsync`); one
//! that does keeps them only once the deployment's epoch markers are recorded in
//! Postgres (`unmarked` until then: claims are written through), then Redis keeps them.

use std::time::Duration;

use super::vouched::{claim_path, gateway};
use crate::support::{eventually, MockUpstream, PgServer, RedisServer};

#[tokio::test]
async fn readyz_names_claims_unmarked_until_the_epoch_markers_are_recorded() {
    let (redis, mut pg, up) = (
        RedisServer::start(),
        PgServer::start(),
        MockUpstream::start().await,
    );
    let app = gateway(&redis, &pg, &up).await;
    assert_eq!(claim_path(&app).await, "written_through (no_fsync)");
    // Redis turns fsync on while Postgres cannot record the markers.
    pg.stop();
    redis.cli(&["CONFIG", "SET", "appendonly", "yes"]);
    redis.cli(&["CONFIG", "SET", "appendfsync", "always"]);
    let unmarked = eventually(Duration::from_secs(10), async || {
        claim_path(&app).await == "written_through (unmarked)"
    });
    assert!(unmarked.await, "{}", claim_path(&app).await);
    // Postgres is back: the next probe records them, and Redis keeps claims.
    pg.restart();
    let kept = eventually(Duration::from_secs(15), async || {
        claim_path(&app).await == "kept_by_redis"
    });
    assert!(kept.await, "{}", claim_path(&app).await);
}
