//! `TestApp::spawn`: a gateway in-process on port 0, against a real Redis and the mock upstream.

use std::net::SocketAddr;

use idemgate::{App, Config, Server};
use reqwest::{Client, RequestBuilder};
use tokio::sync::oneshot;

pub struct TestApp {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub client: Client,
    /// The app's stores, for what it knows of itself ([`TestApp::breaker_open`]).
    stores: idemgate::testing::store::Stores,
    stop: Option<oneshot::Sender<()>>,
}

/// The route every test uses, plus `extra` TOML appended at the end. The replay cache
/// is off, so that tests see what the stores do; `replay/cache.rs` turns it on.
pub fn config(redis: &str, upstream: &str, extra: &str) -> Config {
    let toml = format!(
        "[replay_cache]\nmax_bytes = \"0B\"\n\
         [redis]\nurl = \"{redis}\"\ncommand_timeout = \"300ms\"\nconnect_timeout = \"500ms\"\nprobe_interval = \"100ms\"\n\
         [[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\nupstream = \"{upstream}\"\n\
         upstream_timeout = \"5s\"\n{extra}"
    );
    let mut config = Config::from_toml(&toml).unwrap_or_else(|e| panic!("test config: {e}"));
    // Most tests are about something other than tenancy and send no `Authorization`:
    // one shared anonymous scope, unless a test sets the policy itself.
    if !extra.contains("anonymous") {
        config.idempotency.anonymous = idemgate::config::AnonymousScope::Shared;
    }
    // Replays are compared byte for byte with the mock upstream's answer, two
    // `Set-Cookie` headers included; the cookie policy has tests of its own.
    if !extra.contains("replay_set_cookie") {
        config.idempotency.replay_set_cookie = true;
    }
    config
}

impl TestApp {
    pub async fn spawn(config: Config) -> Self {
        let app = App::build(config).await.unwrap();
        let stores = app.stores.clone();
        let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let admin = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = Server::with_listeners(app, proxy, admin);
        let (addr, admin) = (server.proxy_addr(), server.admin_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));
        Self {
            addr,
            admin,
            client: Client::new(),
            stores,
            stop: Some(stop),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The `/metrics` text of the admin listener.
    pub async fn metrics(&self) -> String {
        let url = format!("http://{}/metrics", self.admin);
        let response = self.client.get(url).send().await.unwrap();
        response.text().await.unwrap()
    }

    /// Whether some shard's Redis breaker is open, as this app's stores say (not
    /// `idemgate_redis_up`: the metrics recorder is one per test process, so another
    /// test's Redis outage would show there; nor `/readyz`, which asks Redis itself).
    pub async fn breaker_open(&self) -> bool {
        !self.stores.claims_in_redis()
    }

    /// Waits (up to 10 s) until this app's probe has read Redis's eviction policy as
    /// `noeviction`: until then no claim is warm, so `lookup_on_miss = "when_cold"`
    /// looks every miss up in Postgres.
    pub async fn until_policy_read(&self) {
        let within = std::time::Duration::from_secs(10);
        let read = super::eventually(within, async || self.stores.redis_keeps_everything());
        assert!(
            read.await,
            "the probe never read the eviction policy as noeviction"
        );
    }

    /// The replay cache's view: it moves on whenever the cache is emptied (a
    /// reconnection of the invalidation feed, a breaker trip, a failover).
    pub fn replay_view(&self) -> u64 {
        self.stores.replay_view()
    }

    /// Whether this app's replay cache holds the record of `key` (the tests' anonymous
    /// scope on the route "payments").
    pub fn caches(&self, key: &str) -> bool {
        self.stores.cached(super::records::id(key)).is_some()
    }

    /// `idemgate_limited_total{limit="<limit>"}` on the admin listener.
    pub async fn limited(&self, limit: &str) -> f64 {
        let series = format!("idemgate_limited_total{{limit=\"{limit}\"}}");
        super::metric(&self.metrics().await, &series)
    }

    /// `GET /readyz` on the admin listener.
    pub async fn readyz(&self) -> reqwest::Response {
        let url = format!("http://{}/readyz", self.admin);
        self.client.get(url).send().await.unwrap()
    }

    /// A keyed JSON POST to `/v1/payments`.
    pub fn post(&self, key: &str, body: &str) -> RequestBuilder {
        self.post_by(&self.client, key, body)
    }

    /// The same POST sent by `client` (one of HTTP/2, or with a timeout of its own).
    pub fn post_by(&self, client: &Client, key: &str, body: &str) -> RequestBuilder {
        super::keyed_post(client, self.url("/v1/payments"), key, body.to_string())
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
