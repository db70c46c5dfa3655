//! A real `redis-server` per test (from the fleet launcher, `fleet/src/redis.rs`: free
//! loopback port, temp dir, killed on drop) plus what the tests read from it through a
//! client: keys, record keys, TTLs. Shared by the `it` tests and the chaos suite
//! (`tests/chaos/`), which also uses the launcher's faults (SIGKILL, a restart with or
//! without its data, commands through `redis-cli`) through `Deref`.

use std::ops::{Deref, DerefMut};

use fred::prelude::{Builder, ClientLike, Config, KeysInterface, LuaInterface};

pub struct RedisServer(idemgate_fleet::RedisServer);

impl Deref for RedisServer {
    type Target = idemgate_fleet::RedisServer;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for RedisServer {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl RedisServer {
    /// Starts a fresh server with no persistence.
    pub fn start() -> Self {
        Self(idemgate_fleet::RedisServer::start())
    }

    /// Starts a server with `extra` arguments after the defaults (no RDB snapshots, no
    /// AOF, `DEBUG` allowed).
    pub fn start_with(extra: &[&str]) -> Self {
        Self(idemgate_fleet::RedisServer::start_with(extra))
    }

    /// Starts a server on `host` (a namespace of the launcher's `NetLab`).
    #[allow(dead_code)] // the chaos suite's partition scenarios
    pub fn start_on(host: &idemgate_fleet::Host, extra: &[&str]) -> Self {
        Self(idemgate_fleet::RedisServer::start_on(host, extra))
    }

    /// Starts a server that speaks TLS only (see the launcher's `RedisTls`).
    pub fn start_tls(tls: idemgate_fleet::RedisTls, extra: &[&str]) -> Self {
        Self(idemgate_fleet::RedisServer::start_tls(tls, extra))
    }

    /// A separate client for inspecting the server from a test.
    pub async fn client(&self) -> fred::prelude::Client {
        let client = Builder::from_config(Config::from_url(&self.url()).unwrap())
            .build()
            .unwrap();
        client.init().await.unwrap();
        client
    }

    /// All keys on the server.
    pub async fn keys(&self) -> Vec<String> {
        let client = self.client().await;
        let keys: Vec<String> = client.custom(fred::cmd!("KEYS"), vec!["*"]).await.unwrap();
        let _ = client.quit().await;
        keys
    }

    /// The record keys (`idemgate:{<64 hex>}`), without fence and waiter keys.
    pub async fn records(&self) -> Vec<String> {
        (self.keys().await.into_iter())
            .filter(|k| k.starts_with("idemgate:{") && k.ends_with('}'))
            .collect()
    }

    /// Each record key with its state field `s` ("L" leased, "C" completed; `None`
    /// when the record went meanwhile).
    pub async fn record_states(&self) -> Vec<(String, Option<String>)> {
        let client = self.client().await;
        let mut states = Vec::new();
        for record in self.records().await {
            let state = (self.record_field(&record, "s").await)
                .map(|s| String::from_utf8_lossy(&s).into_owned());
            states.push((record, state));
        }
        let _ = client.quit().await;
        states
    }

    /// One field of the record at `key` (`s`, `f`, `t`, `n`, `w`, `r`), read in either
    /// layout (`lua/record.lua`: a string, or the previous release's hash); `None`
    /// without the record or the field.
    pub async fn record_field(&self, key: &str, field: &str) -> Option<bytes::Bytes> {
        let script = concat!(
            include_str!("../../../lua/record.lua"),
            "local v = rec_get(KEYS[1]) if not v then return false end\n",
            "local x = v[ARGV[1]] if x == true then return '1' end return x or false\n"
        );
        let client = self.client().await;
        let value: Option<bytes::Bytes> = (client.eval(script, key, field)).await.unwrap();
        let _ = client.quit().await;
        value
    }

    /// Overwrites fields of the record at `key`, in its own layout, keeping its TTL.
    pub async fn set_record_fields(&self, key: &str, fields: &[(&str, &[u8])]) {
        let script = concat!(
            include_str!("../../../lua/record.lua"),
            "local v = rec_get(KEYS[1])\n",
            "for i = 1, #ARGV, 2 do v[ARGV[i]] = ARGV[i + 1] end\n",
            "if v.w == '0' then v.w = false end\n",
            "rec_put(KEYS[1], v.hash, false, v.s, v.w, v.f, v.t, v.n or '', v.r,",
            " redis.call('PTTL', KEYS[1])) return 1\n"
        );
        let args: Vec<fred::prelude::Value> = (fields.iter())
            .flat_map(|(k, v)| [(*k).into(), bytes::Bytes::copy_from_slice(v).into()])
            .collect();
        let client = self.client().await;
        let _: i64 = (client.eval(script, key, args)).await.unwrap();
        let _ = client.quit().await;
    }

    /// Milliseconds to live of `key`.
    pub async fn pttl(&self, key: &str) -> i64 {
        let client = self.client().await;
        let ttl: i64 = client.pttl(key).await.unwrap();
        let _ = client.quit().await;
        ttl
    }
}

/// Makes the server at `url` provably warm for the slots in `ranges` (inclusive): the
/// warmth marker of each says this server process has held every write for `age`
/// (written as `lua/claim.lua` writes it: the number, then turned "raw" here only, by
/// an APPEND of nothing that is neither replicated nor persisted). Works on a cluster
/// primary for the slots it owns.
pub async fn backdate_markers(url: &str, ranges: &[(u16, u16)], age: std::time::Duration) {
    let client = Builder::from_config(Config::from_url(url).unwrap())
        .build()
        .unwrap();
    client.init().await.unwrap();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let since = (now_ms - age.as_millis() as u64).to_string();
    let script = "redis.call('SET', KEYS[1], ARGV[1]) redis.set_repl(redis.REPL_NONE) \
                  redis.call('APPEND', KEYS[1], '') redis.set_repl(redis.REPL_ALL)";
    let markers = idemgate::testing::store::redis::slots::SlotMarkers::new("idemgate", "warm");
    let pipeline = client.pipeline();
    for &(first, last) in ranges {
        for slot in first..=last {
            let key = markers.all()[usize::from(slot)].as_str();
            let _: () = pipeline
                .custom(fred::cmd!("EVAL"), vec![script, "1", key, since.as_str()])
                .await
                .unwrap();
        }
    }
    let _: Vec<fred::prelude::Value> = pipeline.all().await.unwrap();
    let _ = client.quit().await;
}
