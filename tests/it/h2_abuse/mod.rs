//! The HTTP/2 attacks a hostile client can make with raw h2c connections (the raw client
//! of `tests/support/src/h2wire.rs`), each against an `idemgate serve` process (a process of its
//! own, so that its gauges and counters are its own) on a real Redis, with the limits
//! set small enough to reach (`max_concurrent_requests = 128`, `buffer_budget = "32MiB"`,
//! `write_timeout = "3s"`, `http2_max_concurrent_streams = 100`), while an ordinary
//! client sends keyed HTTP/1.1 POSTs of another tenant. Each test holds its attack and
//! shows that the ordinary client is served meanwhile, and how the gateway ends it:
//! stalled readers (`stalled.rs`), declared bodies and stream slots (`slots.rs`), resets
//! after the claim (`resets.rs`), idle connections (`idle.rs`).

mod grpc_stalled;
mod idle;
mod resets;
mod slots;
mod stalled;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemgate_fleet::Replica;
use tokio::task::JoinHandle;

use crate::support::attack_upstream::AttackUpstream;
use crate::support::{keyed_post, serve_process, MockUpstream, RedisServer};

/// The limits, reachable in a test.
const LIMITS: &str = "max_concurrent_requests = 128\nbuffer_budget = \"32MiB\"\n\
                      write_timeout = \"3s\"\nhttp2_max_concurrent_streams = 100\n";
/// One connection's share of `max_concurrent_requests` (25% of 128).
const SHARE: usize = 32;
/// One connection's share of `buffer_budget`: 25% of 32 MiB, when that is at least
/// `max_request_body` + `max_response_body` (the share's floor; the stalled readers'
/// gateway has 1 MiB + 2 MiB).
const BUDGET_SHARE: u64 = 8 << 20;
const WRITE_TIMEOUT: Duration = Duration::from_secs(3);
const MIB: u64 = 1 << 20;

/// A gateway process under attack (a Redis command timeout of 5 s: what the tests
/// see are the limits, not a busy machine's Redis), its Redis, and its two upstreams: the ordinary
/// client's (`/v1/`, the counting mock) and the attacker's (`/attack/`).
struct Target {
    _redis: RedisServer,
    _dir: tempfile::TempDir,
    _normal: MockUpstream,
    pub attack: AttackUpstream,
    pub replica: Replica,
    pub addr: SocketAddr,
    pub http: reqwest::Client,
}

impl Target {
    /// Starts it with [`LIMITS`] and `server` (more `[server]` keys).
    async fn start(name: &str, server: &str) -> Self {
        let redis = RedisServer::start();
        let (normal, attack) = (MockUpstream::start().await, AttackUpstream::start().await);
        let dir = tempfile::tempdir().unwrap();
        let toml = format!(
            "{LIMITS}{server}[replay_cache]\nmax_bytes = \"0B\"\n\
             [redis]\nurl = \"{}\"\ncommand_timeout = \"5s\"\n\
             [[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\nupstream = \"{}\"\n\
             upstream_timeout = \"10s\"\n\
             [[routes]]\nname = \"attack\"\npath_prefix = \"/attack/\"\nupstream = \"{}\"\n\
             upstream_timeout = \"10s\"\n",
            redis.url(),
            normal.url(),
            attack.url(),
        );
        let replica = serve_process(dir.path(), name, &toml).await;
        let addr = ([127, 0, 0, 1], replica.port).into();
        Self {
            _redis: redis,
            _dir: dir,
            _normal: normal,
            attack,
            replica,
            addr,
            http: reqwest::Client::new(),
        }
    }

    /// The sum of a metric's lines that start with `name` (a name, or a name and its
    /// labels); 0 when there is none.
    async fn metric(&self, name: &str) -> f64 {
        let url = format!("{}/metrics", self.replica.admin_url());
        let text = self
            .http
            .get(url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        crate::support::metric(&text, name)
    }

    /// `idemgate_limited_total{limit="<limit>"}`.
    async fn limited(&self, limit: &str) -> f64 {
        (self.metric(&format!("idemgate_limited_total{{limit=\"{limit}\"}}"))).await
    }

    /// `idemgate_buffered_bytes` (sampled every second).
    async fn buffered(&self) -> u64 {
        self.metric("idemgate_buffered_bytes").await as u64
    }

    /// The largest `idemgate_buffered_bytes` read from `from` to `to` (every 200 ms).
    async fn buffered_peak(&self, from: Instant, to: Instant) -> u64 {
        tokio::time::sleep_until(from.into()).await;
        let mut peak = 0;
        while Instant::now() < to {
            peak = peak.max(self.buffered().await);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        peak
    }

    /// Waits, at most `within`, for `idemgate_buffered_bytes` to read 0; its last value.
    async fn buffered_drained(&self, within: Duration) -> u64 {
        let deadline = Instant::now() + within;
        loop {
            let now = self.buffered().await;
            if now == 0 || Instant::now() > deadline {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The ordinary client: keyed HTTP/1.1 POSTs of tenant `normal`, one after another,
    /// until stopped.
    fn ordinary(&self, prefix: &str) -> Ordinary {
        let stop = Arc::new(AtomicBool::new(false));
        let (base, prefix, stopped) = (
            format!("http://{}", self.addr),
            prefix.to_string(),
            stop.clone(),
        );
        let task = tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap();
            let mut answers = Vec::new();
            let mut n = 0;
            while !stopped.load(Relaxed) {
                n += 1;
                let (key, body) = (format!("{prefix}-{n}"), format!("{{\"n\":{n}}}"));
                let sent = keyed_post(&http, format!("{base}/v1/payments"), &key, body)
                    .header("Authorization", "Bearer normal")
                    .send()
                    .await;
                let status = match sent {
                    Ok(r) => {
                        let status = r.status().as_u16();
                        if r.bytes().await.is_ok() {
                            status
                        } else {
                            0
                        }
                    }
                    Err(_) => 0,
                };
                answers.push((Instant::now(), status));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            answers
        });
        Ordinary { stop, task }
    }
}

/// The ordinary client running.
struct Ordinary {
    stop: Arc<AtomicBool>,
    task: JoinHandle<Vec<(Instant, u16)>>,
}

impl Ordinary {
    /// Stops it: every answer (when, status; 0 for a failed exchange).
    async fn stop(self) -> Answers {
        self.stop.store(true, Relaxed);
        Answers(self.task.await.unwrap())
    }
}

struct Answers(Vec<(Instant, u16)>);

impl Answers {
    /// The answers that came between `from` and `to`: (2xx, others' statuses).
    fn between(&self, from: Instant, to: Instant) -> (usize, Vec<u16>) {
        let within = self.0.iter().filter(|(at, _)| (from..to).contains(at));
        let (ok, failed): (Vec<_>, Vec<_>) = within.partition(|(_, s)| (200..300).contains(s));
        (ok.len(), failed.into_iter().map(|(_, s)| s).collect())
    }

    /// Asserts that every answer was a 2xx and that at least `min` came between `from`
    /// and `to` (while the attack was held).
    fn assert_served(&self, from: Instant, to: Instant, min: usize, attack: &str) {
        let mut failed = std::collections::BTreeMap::<u16, usize>::new();
        for (_, status) in self.0.iter().filter(|(_, s)| !(200..300).contains(s)) {
            *failed.entry(*status).or_default() += 1;
        }
        assert!(
            failed.is_empty(),
            "{attack}: the ordinary client got non-2xx answers (status: count, 0 = no answer: \
             {failed:?}) of {}",
            self.0.len()
        );
        let (held, _) = self.between(from, to);
        assert!(
            held >= min,
            "{attack}: only {held} ordinary requests were answered while the attack was held \
             ({:?}), fewer than {min}",
            to - from
        );
    }
}

/// A keyed POST's HEADERS on `stream` as the attacker sends it (tenant `attacker`),
/// with these more fields, the client's side left open.
fn attacker_post(stream: u32, path: &str, key: &str, more: &[(&str, &str)]) -> Vec<u8> {
    let mut fields = vec![
        ("idempotency-key", key),
        ("authorization", "Bearer attacker"),
        ("content-type", "application/json"),
    ];
    fields.extend_from_slice(more);
    crate::support::h2wire::request(stream, "POST", path, &fields)
}

#[test]
fn the_raw_client_reads_static_and_literal_statuses() {
    use crate::support::h2wire::status;
    assert_eq!(status(&[0x88, 0x5f]), Some(200));
    assert_eq!(
        status(&[0x20, 0x8d]),
        Some(404),
        "after a table size update"
    );
    // `503`, Huffman-coded (as hyper's encoder sends it), then `201` as plain digits.
    assert_eq!(status(&[0x48, 0x83, 0x6c, 0x0c, 0xff, 0x5f]), Some(503));
    assert_eq!(status(&[0x08, 0x03, b'2', b'0', b'1']), Some(201));
    assert_eq!(status(&[0xbe]), None, "a dynamic entry");
}
