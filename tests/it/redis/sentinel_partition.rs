//! A network partition of a Sentinel deployment: the primary, the first
//! configured sentinel and one gateway replica (B) cut off from the replica, the other
//! two sentinels and another gateway replica (A), with the launcher's `NetLab` (every
//! part in a namespace of its own; packets vanish, no RST). Redis-only mode, where what
//! a replica stores on the wrong side of the cut is simply lost.
//!
//! Before the sentinel watch (`store/redis/sentinel_watch.rs`) A kept sending every claim to
//! the old primary for the whole partition (503s, never following the promotion the
//! majority made), and B kept storing responses on the old primary, all lost when it
//! rejoined as a replica. Now A follows the promotion and B stops claiming in Redis.
//! Skips (saying why) without root, `ip netns` or nftables.

use std::path::Path;
use std::time::{Duration, Instant};

use idemgate_fleet::{free_port, Host, NetLab, Replica, SentinelSet, Upstream, SENTINEL_SERVICE};

use crate::support::process::BIN;

const DEMO_UPSTREAM: &str = env!("CARGO_BIN_EXE_demo-upstream");

fn gateway(dir: &Path, index: usize, host: &Host, sentinels: &SentinelSet, up: &str) -> Replica {
    let (port, admin) = (free_port(), free_port());
    let nodes: Vec<String> = sentinels.sentinel_urls();
    let toml = format!(
        "[server]\nlisten = \"{ip}:{port}\"\nadmin_listen = \"{ip}:{admin}\"\n\
         [log]\nformat = \"text\"\nfilter = \"info\"\n\
         [redis]\nmode = \"sentinel\"\ncommand_timeout = \"300ms\"\nconnect_timeout = \"500ms\"\n\
         probe_interval = \"100ms\"\n\
         [redis.sentinel]\nservice_name = \"{SENTINEL_SERVICE}\"\nnodes = {nodes:?}\n\
         [idempotency]\nttl = \"1h\"\nlock_ttl = \"3s\"\n\
         [[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\nupstream = \"{up}\"\n\
         upstream_timeout = \"2s\"\n",
        ip = host.ip,
    );
    let config = dir.join(format!("gw{index}.toml"));
    std::fs::write(&config, toml).unwrap();
    let log = dir.join(format!("gw{index}.log"));
    let mut r = Replica::new(Path::new(BIN), index, port, admin, config, log).on(host.clone());
    r.start();
    r
}

/// One keyed POST with a fresh key: its status (0 for no answer within a second).
async fn fresh_key(http: &reqwest::Client, gw: &Replica, n: &mut u32) -> u16 {
    *n += 1;
    let sent = http
        .post(format!("{}/v1/payments?latency_ms=1", gw.url()))
        .header(
            "Idempotency-Key",
            format!("sentinel-cut-gw{}-{n}", gw.index),
        )
        .header("Authorization", "Bearer tenant-1")
        .header("Content-Type", "application/json")
        .body(format!("{{\"amount\":{n}}}"))
        .timeout(Duration::from_secs(1))
        .send()
        .await;
    sent.map(|r| r.status().as_u16()).unwrap_or(0)
}

/// Sends fresh keys to `gw` until one gets `want` (or `within` passes): how long it took.
async fn until(http: &reqwest::Client, gw: &Replica, want: u16, within: Duration) -> Option<u128> {
    let (t, mut n) = (Instant::now(), 0);
    while t.elapsed() < within {
        if fresh_key(http, gw, &mut n).await == want {
            return Some(t.elapsed().as_millis());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread")]
async fn each_side_of_a_sentinel_partition_follows_the_majority() {
    if let Some(why) = NetLab::unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let lab = NetLab::new().unwrap();
    let host = |name: &str| lab.host(name).unwrap();
    let (r0, r1) = (host("redis0"), host("redis1"));
    let (s0, s1, s2) = (host("sent0"), host("sent1"), host("sent2"));
    let (ha, hb, hu) = (host("gwA"), host("gwB"), host("upstream"));
    let dir = tempfile::tempdir().unwrap();
    let sentinels =
        tokio::task::block_in_place(|| SentinelSet::start_on([&r0, &r1], [&s0, &s1, &s2]));
    let upstream = Upstream::start_on(&hu, Path::new(DEMO_UPSTREAM), dir.path(), &[]);
    let http = reqwest::Client::new();
    let a = gateway(dir.path(), 0, &ha, &sentinels, &upstream.url());
    let b = gateway(dir.path(), 1, &hb, &sentinels, &upstream.url());
    for gw in [&a, &b] {
        let ready = until(&http, gw, 201, Duration::from_secs(20)).await;
        assert!(
            ready.is_some(),
            "gw{} never answered 201:\n{}",
            gw.index,
            gw.log_text()
        );
    }

    lab.cut(&[&r0, &s0, &hb], &[&r1, &s1, &s2, &ha]).unwrap();
    let cut = Instant::now();
    let promoted = tokio::task::block_in_place(|| {
        sentinels.wait_primary_among(&[1], &[1, 2], Duration::from_secs(20))
    })
    .expect("no promotion within 20 s");

    // The majority side follows the promotion.
    let a_back = until(&http, &a, 201, Duration::from_secs(6)).await;
    assert!(
        a_back.is_some(),
        "gw A (majority side) did not claim on the promoted replica within 6 s of the \
         promotion ({promoted:?} after the cut); its log:\n{}",
        a.log_text()
    );
    // The minority side no longer stores anything on the old primary.
    let mut n = 1000;
    let mut stored = 0;
    for _ in 0..10 {
        if fresh_key(&http, &b, &mut n).await == 201 {
            stored += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        stored,
        0,
        "gw B (minority side) stored responses on the old primary {:?} after the cut",
        cut.elapsed()
    );

    lab.heal().unwrap();
    tokio::task::block_in_place(|| sentinels.wait_agreed(Duration::from_secs(30)));
    let b_back = until(&http, &b, 201, Duration::from_secs(10)).await;
    assert!(
        b_back.is_some(),
        "gw B not back after the heal:\n{}",
        b.log_text()
    );
    drop((a, b, upstream, sentinels));
}
