//! What `/readyz` says of vouched claims (`claim_path`) as what they rely on comes and
//! goes: a Redis that does not fsync every write writes them through (`no_fsync`); one
//! that does keeps them only once the deployment's epoch markers are recorded in
//! Postgres (`unmarked` until then: claims are written through), then Redis keeps them.
//! And the default claims on a Redis that never kept one alone keep write-through's
//! outage path: while Redis is down, claims move to Postgres.

use std::time::Duration;

use super::vouched::{claim_path, gateway, post};
use crate::support::{config, eventually, MockUpstream, PgServer, RedisServer, TestApp};

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

/// The default configuration (vouched claims) on a Redis without the AOF: no claim was
/// ever kept by Redis alone, so when Redis goes away the claims move to Postgres as
/// write-through claims do (not 503), each key runs once, and its retry replays.
#[tokio::test]
async fn on_a_redis_that_never_kept_a_claim_alone_an_outage_moves_claims_to_postgres() {
    let (mut redis, pg, up) = (
        RedisServer::start(),
        PgServer::start(),
        MockUpstream::start().await,
    );
    let app = TestApp::spawn(config(&redis.url(), &up.url(), &pg.section(""))).await;
    assert_eq!(post(&app, "before-the-outage").await.0, 201);
    redis.stop();
    // The first call after the kill may meet the connection as it breaks (503, nothing
    // forwarded); the same key is tried until Postgres takes its claim.
    let mut stored = None;
    let moved = eventually(Duration::from_secs(10), async || {
        let (status, body) = post(&app, "during-the-outage").await;
        assert!(matches!(status, 201 | 503), "{status}");
        stored = (status == 201).then_some(body);
        stored.is_some()
    })
    .await;
    assert!(moved, "claims moved to postgres while redis was down");
    assert_eq!(pg.count("state = 'completed'").await, 2);
    let again = post(&app, "during-the-outage").await;
    assert_eq!(
        again,
        (201, stored.unwrap()),
        "the retry replays from postgres"
    );
    assert_eq!(up.executions(), 2, "one execution per key");
}
