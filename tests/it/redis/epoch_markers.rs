//! Writing the epoch markers (one per hash slot, 16,384 keys) survives being cut short:
//! a try that fails part-way (Redis full, a timeout of the start-up or probe budget)
//! keeps the slots it wrote, and the next try writes only the rest, so a slow Redis is
//! swept over several tries instead of never.

use std::time::Duration;

use idemgate::config::RedisConfig;
use idemgate::testing::store::RedisStore;
use idemgate_fleet::info_field;

use crate::support::RedisServer;

const SLOTS: u64 = 16_384;

/// `SET` commands Redis ran since its statistics were last reset.
fn sets(redis: &RedisServer) -> u64 {
    let stats = redis.cli(&["INFO", "commandstats"]);
    let calls = info_field(&stats, "cmdstat_set").unwrap_or("calls=0,");
    let calls = calls.trim_start_matches("calls=").split(',').next();
    calls.and_then(|c| c.parse().ok()).unwrap_or(0)
}

fn keys(redis: &RedisServer) -> u64 {
    redis.cli(&["DBSIZE"]).trim().parse().unwrap()
}

#[tokio::test]
async fn a_sweep_cut_short_goes_on_where_it_stopped() {
    let redis = RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]);
    let config = RedisConfig {
        url: redis.url(),
        ..RedisConfig::default()
    };
    let store = RedisStore::connect_with(&config, Some(Duration::from_secs(2)), None)
        .await
        .unwrap();
    // Room for about half the markers: writes past it are refused (noeviction).
    let info = redis.cli(&["INFO", "memory"]);
    let used: u64 = info_field(&info, "used_memory").unwrap().parse().unwrap();
    let limit = (used + 600 * 1024).to_string();
    redis.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    redis.cli(&["CONFIG", "SET", "maxmemory", &limit]);

    let first = store.write_epoch_markers().await;
    assert!(first.is_err(), "redis refused writes part-way: {first:?}");
    assert!(!store.epochs_swept(), "the sweep is not done");
    let written = keys(&redis);
    assert!(
        written > 0 && written < SLOTS,
        "cut part-way: {written} markers"
    );

    redis.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    redis.cli(&["CONFIG", "RESETSTAT"]);
    store.write_epoch_markers().await.unwrap();
    assert!(store.epochs_swept());
    assert_eq!(keys(&redis), SLOTS, "every slot has its marker");
    // The try goes on from the pipeline (256 slots) that was refused, no earlier.
    let again = sets(&redis);
    assert!(
        again <= SLOTS - written + 256,
        "{again} SETs for the {} markers left",
        SLOTS - written
    );
    assert!(again >= SLOTS - written, "{again} SETs");
}
