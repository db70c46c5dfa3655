//! A vouched lease's holder and Redis' copy of it: the heartbeat writes back a lease
//! Redis lost with its slot's data (so the key stays in flight and runs once), and never
//! one deleted on purpose (a forced invalidation frees the key, as documented).

use std::time::Duration;

use super::vouched::{fsyncing_redis, gateway_with, post, QUARANTINE};
use crate::support::{MockUpstream, PgServer, RedisServer, TestApp};

const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// The vouched gateway with the admin API on.
async fn gateway(redis: &RedisServer, pg: &PgServer, up: &MockUpstream) -> TestApp {
    gateway_with(
        redis,
        pg,
        up,
        &format!("[admin]\ntoken = \"{ADMIN_TOKEN}\"\n"),
    )
    .await
}

#[tokio::test]
async fn a_flushed_redis_keeps_the_key_in_flight_until_the_holder_writes_its_lease_back() {
    let (redis, pg, up) = (
        fsyncing_redis(),
        PgServer::start(),
        MockUpstream::start().await,
    );
    let app = gateway(&redis, &pg, &up).await;
    up.set_delay(Duration::from_millis(3000));
    let first = post(&app, "flushed");
    let retries = async {
        up.until_executions(1).await;
        // Redis loses everything, the epoch markers included; the holder still runs.
        redis.cli(&["FLUSHALL"]);
        // At once: the key is absent from a slot that just lost its data, so in flight.
        let early = post(&app, "flushed").await.0;
        // After the quarantine (real time): the holder's heartbeat wrote its lease back.
        tokio::time::sleep(QUARANTINE).await;
        let late = post(&app, "flushed").await.0;
        (early, late)
    };
    let ((status, body), (early, late)) = tokio::join!(first, retries);
    assert_eq!(status, 201, "the holder's completion is not refused");
    assert_eq!(early, 409, "in flight during the quarantine");
    assert_eq!(late, 409, "in flight: the holder wrote its lease back");
    assert_eq!(up.executions(), 1, "the key ran once");
    assert_eq!(
        post(&app, "flushed").await,
        (201, body),
        "the holder's answer replays"
    );
    assert_eq!(up.executions(), 1);
}

/// A forced invalidation deletes a running key's record; the holder's heartbeats (every
/// third of the lease) must not write it back, since the slot lost nothing: the key's
/// next request runs it again, as the admin asked.
#[tokio::test]
async fn a_forced_invalidation_is_not_undone_by_the_holders_heartbeat() {
    let (redis, pg, up) = (
        fsyncing_redis(),
        PgServer::start(),
        MockUpstream::start().await,
    );
    let app = gateway(&redis, &pg, &up).await;
    up.set_delay(Duration::from_millis(4000));
    let first = post(&app, "forced");
    let freed = async {
        up.until_executions(1).await;
        let url = format!("http://{}/admin/keys/payments/forced?force=true", app.admin);
        let deleted = (app.client.delete(url))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(deleted.status(), 200);
        // Two heartbeats of the holder's 1.5 s lease go by.
        tokio::time::sleep(super::vouched::LOCK_TTL).await;
        let record = crate::redis::record_key("forced");
        let absent = redis.cli(&["EXISTS", &record]).trim() == "0";
        up.set_delay(Duration::ZERO);
        let again = post(&app, "forced").await.0;
        (absent, again)
    };
    let ((first, _), (absent, again)) = tokio::join!(first, freed);
    assert!(absent, "the heartbeat wrote the deleted lease back");
    assert_eq!(again, 201, "the key's next request runs it");
    assert_eq!(up.executions(), 2, "freed on purpose: it ran again");
    assert!(
        first == 201 || first == 409,
        "the first execution's completion is refused or stored: {first}"
    );
}
