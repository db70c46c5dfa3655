//! The mixed-version fleet of the upgrade tests: two replicas, each on the binary and
//! settings its test says, on one configuration both versions accept, behind HAProxy.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use idemgate_fleet::{free_port, BackendProto, HaProxy, HaproxyConfig, Host, Replica};

use super::WAIT_TIMEOUT;
use crate::support::{
    eventually, keyed_post, send, wait_ready, Answer, MockUpstream, PgServer, RedisServer,
};

/// The previous release's binary, from `IDEMGATE_PREVIOUS_BIN`.
pub(in crate::binary) fn previous_binary() -> PathBuf {
    let bin = std::env::var_os("IDEMGATE_PREVIOUS_BIN").expect(
        "IDEMGATE_PREVIOUS_BIN is not set: run `make upgrade-check`, which builds the \
         previous release (tests/upgrade/build-base.sh) and runs this test",
    );
    PathBuf::from(bin)
}

/// A replica: its binary, extra `[redis]` lines and its `[postgres]` lines.
pub(in crate::binary) type Spec<'a> = (&'a Path, &'a str, &'a str);

/// Two replicas (each test says which binary and settings each runs) and HAProxy in
/// front of both.
pub(in crate::binary) struct Fleet {
    pub(in crate::binary) replicas: Vec<Replica>,
    pub(super) haproxy: HaProxy,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

impl Fleet {
    /// One replica per `(binary, extra [redis] lines, [postgres] lines)`, started in
    /// that order.
    pub(in crate::binary) async fn start(
        redis: &RedisServer,
        pg: &PgServer,
        upstream: &MockUpstream,
        bins: &[Spec<'_>],
    ) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("k1");
        let material: Vec<u8> = (0..32u8)
            .map(|i| i.wrapping_mul(7).wrapping_add(3))
            .collect();
        let text = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, material);
        std::fs::write(&key, format!("{text}\n")).unwrap();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap();
        let mut replicas = Vec::new();
        for (index, &(bin, redis_extra, pg_lines)) in bins.iter().enumerate() {
            let (port, admin) = (free_port(), free_port());
            let config = dir.path().join(format!("replica{index}.toml"));
            std::fs::write(
                &config,
                replica_toml(
                    port,
                    admin,
                    (redis, redis_extra),
                    (pg, pg_lines),
                    upstream,
                    &key,
                ),
            )
            .unwrap();
            accepted_by(bin, &config);
            let log = dir.path().join(format!("replica{index}.log"));
            let mut replica = Replica::new(bin, index, port, admin, config, log);
            // One at a time: the previous release migrates first, as in a real fleet.
            replica.start();
            wait_ready(&http, &mut replica, Duration::from_secs(30)).await;
            replicas.push(replica);
        }
        let backends = replicas.iter().map(Replica::backend).collect();
        let haproxy = HaProxy::start(
            dir.path(),
            &HaproxyConfig {
                host: Host::loopback(),
                port: free_port(),
                backends,
                abort_on_close: true,
                health_checks: true,
                proto: BackendProto::Http1,
            },
        );
        let fleet = Self {
            replicas,
            haproxy,
            http,
            _dir: dir,
        };
        // HAProxy passes a request on (the upstream's answer, not a 503 of its own).
        let answers = eventually(Duration::from_secs(5), async || {
            fleet.get_front().await.is_some_and(|status| status < 500)
        });
        assert!(answers.await, "HAProxy passes requests on");
        // A replica with vouched claims keeps them in Redis alone only once its shard
        // is seen to keep them and the deployment's epoch markers are recorded (the
        // vouched switch, `upgrade_vouched.rs`, asserts it): until `/readyz` says so.
        for replica in &fleet.replicas {
            let kept = eventually(Duration::from_secs(15), async || {
                fleet.kept_by_redis(replica).await
            });
            assert!(kept.await, "replica {}: {}", replica.index, fleet.logs());
        }
        fleet
    }

    /// Whether `replica`'s claims are kept where its mode keeps them: with vouched
    /// claims, every shard's by Redis (`/readyz`'s `claim_path`); any other mode is.
    async fn kept_by_redis(&self, replica: &Replica) -> bool {
        let url = format!("{}/readyz", replica.admin_url());
        let Ok(answer) = self.http.get(url).send().await else {
            return false;
        };
        let body: serde_json::Value = answer.json().await.unwrap_or_default();
        let path = &body["claim_path"];
        let shards = path["shards"].as_array().cloned().unwrap_or_default();
        match path["mode"].as_str() {
            Some("vouched") => shards.iter().all(|s| s["claims"] == "kept_by_redis"),
            // The previous release may not say: its claims are written through.
            _ => true,
        }
    }

    /// HAProxy's answer to a GET of `/v1/ping`, if any.
    async fn get_front(&self) -> Option<u16> {
        let r = self
            .http
            .get(format!("{}/v1/ping", self.haproxy.url()))
            .send()
            .await;
        r.ok().map(|r| r.status().as_u16())
    }

    /// A keyed POST of `tenant` to `base` (a replica or the load balancer).
    pub(super) async fn post(&self, base: &str, key: &str, tenant: &str) -> Answer {
        let body = format!("{{\"amount\":10,\"key\":\"{key}\"}}");
        let request = keyed_post(&self.http, format!("{base}/v1/payments"), key, body);
        send(request.header("X-Tenant-Id", tenant)).await
    }

    /// Every replica's log, each under a header line.
    pub(super) fn logs(&self) -> String {
        (self.replicas.iter())
            .map(|r| format!("--- replica {} ---\n{}", r.index, r.log_text()))
            .collect()
    }
}

/// One configuration file for both versions: only keys the previous release knows. No
/// replay cache: every replay below is read from the stores.
fn replica_toml(
    port: u16,
    admin: u16,
    (redis, redis_extra): (&RedisServer, &str),
    (pg, pg_lines): (&PgServer, &str),
    upstream: &MockUpstream,
    key: &Path,
) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\
         shutdown_grace = \"2s\"\n\
         [replay_cache]\nmax_bytes = 0\n\
         [redis]\nurl = \"{}\"\ncommand_timeout = \"2s\"\n{}\
         {}\
         [idempotency]\nscope_headers = [\"X-Tenant-Id\"]\nin_flight = \"wait\"\n\
         wait_timeout = \"{}s\"\nlock_ttl = \"30s\"\nreplay_set_cookie = true\n\
         [encryption]\nkeys = [{{ id = \"k1\", key_file = \"{}\" }}]\nactive = \"k1\"\n\
         [[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\nupstream = \"{}\"\n\
         upstream_timeout = \"10s\"\n",
        redis.url(),
        redis_extra,
        pg.section(pg_lines),
        WAIT_TIMEOUT.as_secs(),
        key.display(),
        upstream.url(),
    )
}

/// `bin check-config` accepts the file, or the test stops naming what it refused.
fn accepted_by(bin: &Path, config: &Path) {
    let out = Command::new(bin)
        .args(["check-config", "--config"])
        .arg(config)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} refuses the shared configuration: {}",
        bin.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}
