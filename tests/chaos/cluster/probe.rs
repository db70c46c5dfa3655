//! What a scenario reads of its fleet: the demo upstream's executions per key
//! ([`Ledger`]) and each replica's readiness and metrics ([`Probe`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use idemgate_fleet::Replica;

/// `GET /_demo/executions`: executions per `Idempotency-Key`.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    pub total: u64,
    pub keys: HashMap<String, u64>,
    /// `--dedupe` mode only: the fencing token of each request received per key, in
    /// arrival order (empty otherwise).
    pub received: HashMap<String, Vec<i64>>,
    /// `--dedupe` mode only: requests refused for a stale fencing token.
    pub stale: u64,
}

impl Ledger {
    /// Executions beyond the first of each key.
    pub fn duplicates(&self) -> u64 {
        self.keys.values().filter(|&&n| n > 1).map(|n| n - 1).sum()
    }
}

/// What the scenarios ask a replica over HTTP, with the stack's client (the process
/// itself is the launcher's [`Replica`]).
pub trait Probe {
    async fn ready(&self, http: &reqwest::Client) -> bool;
    async fn wait_ready(&self, http: &reqwest::Client, within: Duration) -> bool;
    /// Sum of a metric over its label sets (`None` if the scrape failed).
    async fn metric(&self, http: &reqwest::Client, name: &str) -> Option<f64>;
}

impl Probe for Replica {
    async fn ready(&self, http: &reqwest::Client) -> bool {
        let url = format!("{}/readyz", self.admin_url());
        matches!(
            http.get(url).timeout(Duration::from_millis(500)).send().await,
            Ok(r) if r.status() == 200
        )
    }

    async fn wait_ready(&self, http: &reqwest::Client, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if self.ready(http).await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    async fn metric(&self, http: &reqwest::Client, name: &str) -> Option<f64> {
        let url = format!("{}/metrics", self.admin_url());
        let text = http
            .get(url)
            .timeout(Duration::from_secs(1))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        Some(
            text.lines()
                .filter(|l| {
                    l.strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
                })
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum(),
        )
    }
}
