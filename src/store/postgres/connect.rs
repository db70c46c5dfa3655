//! Making a connection: the hosts of `postgres.url` tried one at a time, each for at
//! most the connect timeout, with a memory of which hosts failed.
//!
//! tokio-postgres tries a URL's hosts in order, but its `connect_timeout` bounds only
//! each TCP connect: a host that accepts the connection and then says nothing (a frozen
//! server, a proxy in front of a dead one) holds the attempt for ever, and any deadline
//! around the whole walk cuts it off before the next host is tried. Here each host is a
//! connection of its own (`host_config`), bounded as libpq bounds it: the connect
//! timeout covers the TCP connect, TLS, start-up and authentication, and the
//! `target_session_attrs` check.
//!
//! Hosts are tried in the URL's order (shuffled under `load_balance_hosts=random`),
//! except that a host whose latest attempt failed goes after those that did not, and a
//! silent one (no answer within the timeout, or a connection of it whose statement got
//! no answer: [`Hosts::suspect`]) after those that refused: a host powered off costs one
//! connect timeout once, not once per new connection, until an attempt on it succeeds
//! again. A walk runs in a task of its own, so a caller that gives up (its statement's
//! deadline) does not cut it short and what it learns about each host is kept.
//!
//! While every host failed its latest attempt (or went silent), the store fails a
//! checkout that needs a new connection at once ([`Hosts::open`]) and probes the hosts
//! in the background, each on its own ([`Hosts::probe`]): a silent Postgres is answered
//! as fast as a refusing one, and the first attempt that connects closes the breaker.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool_postgres::Connect;
use tokio::task::JoinHandle;
use tokio_postgres::config::LoadBalanceHosts;
use tokio_postgres::{Client, Config, Error};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::host_config::{chain, label, per_host};

/// Least time between two background probes while every host fails.
const PROBE_PAUSE: Duration = Duration::from_millis(250);

/// How a host's latest attempt failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Failed {
    /// It answered, with a refusal (connection refused, read-only, an error).
    Refused(Instant),
    /// It said nothing within the connect timeout, or a statement got no answer.
    Silent(Instant),
}

/// What the walks learnt.
#[derive(Default)]
struct State {
    /// Per host: how its latest attempt failed (`None`: it succeeded, or none yet).
    failed: Vec<Option<Failed>>,
    /// Per host: why, for the error of a checkout refused while every host fails.
    why: Vec<String>,
    /// The host of the latest connection made, and since when it is that host.
    current: Option<(usize, Instant)>,
    /// Per host: a probe's attempt is in flight ([`Hosts::probe`]).
    probing: Vec<bool>,
    /// Per host: when the latest probe of it ended.
    probed_at: Vec<Option<Instant>>,
}

/// The hosts of `postgres.url` and what is known of them (shared by the pool's
/// connector and the store).
pub(super) struct Hosts {
    /// One configuration per host, each naming that host only.
    configs: Vec<Config>,
    labels: Vec<String>,
    tls: MakeRustlsConnect,
    /// Per host, for the whole attempt.
    timeout: Duration,
    random: bool,
    state: Mutex<State>,
}

impl Hosts {
    /// The hosts of `config` (checked as tokio-postgres checks them), each given
    /// `timeout`.
    pub(super) fn new(
        config: &Config,
        tls: MakeRustlsConnect,
        timeout: Duration,
    ) -> Result<Self, String> {
        let (hosts, addrs, ports) = (
            config.get_hosts(),
            config.get_hostaddrs(),
            config.get_ports(),
        );
        let n = hosts.len().max(addrs.len());
        if n == 0 {
            return Err("postgres.url names no host".into());
        }
        if !hosts.is_empty() && !addrs.is_empty() && hosts.len() != addrs.len() {
            return Err("postgres.url: as many hostaddr as host values are needed".into());
        }
        if ports.len() > 1 && ports.len() != n {
            return Err("postgres.url: one port, or one per host, is needed".into());
        }
        let configs: Vec<Config> = (0..n).map(|i| per_host(config, i, timeout)).collect();
        Ok(Self {
            labels: configs.iter().map(label).collect(),
            configs,
            tls,
            timeout,
            random: config.get_load_balance_hosts() == LoadBalanceHosts::Random,
            state: Mutex::new(State {
                failed: vec![None; n],
                why: vec![String::new(); n],
                probing: vec![false; n],
                probed_at: vec![None; n],
                ..State::default()
            }),
        })
    }

    pub(super) fn len(&self) -> usize {
        self.configs.len()
    }

    /// The per-host timeout in force.
    pub(super) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether every host failed its latest attempt (or went silent since).
    pub(super) fn open(&self) -> bool {
        lock(&self.state).failed.iter().all(Option::is_some)
    }

    /// Why each host failed its latest attempt (for an error).
    pub(super) fn why(&self) -> String {
        let state = lock(&self.state);
        let each = (self.labels.iter().zip(&state.why))
            .map(|(host, why)| format!("{host}: {why}"))
            .collect::<Vec<_>>();
        each.join("; ")
    }

    /// A statement on a connection made at `created` got no answer: if that connection
    /// is to the current host, the host is silent (new connections try the others
    /// first). Returns the instant before which connections are to be dropped: now, or
    /// (a connection to a host left before) when the current host was taken up.
    pub(super) fn suspect(&self, created: Instant) -> Instant {
        let now = Instant::now();
        let mut state = lock(&self.state);
        match state.current {
            Some((i, since)) if created >= since => {
                if !matches!(state.failed[i], Some(Failed::Silent(_))) {
                    tracing::warn!(host = %self.labels[i], "postgres: a statement got no \
                        answer; new connections try the other hosts first");
                }
                state.failed[i] = Some(Failed::Silent(now));
                state.why[i] = "a statement got no answer".into();
                now
            }
            Some((_, since)) => since,
            None => now,
        }
    }

    /// While every host fails: tries again, in the background, each host that has no
    /// attempt in flight and whose latest one ended at least [`PROBE_PAUSE`] ago. Hosts
    /// are probed each on its own, so a silent one (an attempt lasting the whole connect
    /// timeout) does not hold back finding one that answers again. A probe's connection
    /// is not kept: it closes the breaker, and the next checkout connects.
    pub(super) fn probe(self: &Arc<Self>) {
        let due: Vec<usize> = {
            let mut state = lock(&self.state);
            let due: Vec<usize> = (0..self.len())
                .filter(|&i| {
                    !state.probing[i]
                        && (state.probed_at[i]).map_or(true, |at| at.elapsed() >= PROBE_PAUSE)
                })
                .collect();
            for &i in &due {
                state.probing[i] = true;
            }
            due
        };
        for i in due {
            let hosts = self.clone();
            tokio::spawn(async move {
                drop(hosts.attempt(i).await);
                let mut state = lock(&hosts.state);
                state.probing[i] = false;
                state.probed_at[i] = Some(Instant::now());
            });
        }
    }

    /// The order of the next walk: hosts whose latest attempt did not fail (in the
    /// URL's order, or shuffled), then those that refused, then the silent ones (each
    /// the oldest failure first).
    fn order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.len()).collect();
        if self.random {
            order.sort_by_cached_key(|_| uuid::Uuid::new_v4().as_u128());
        }
        let state = lock(&self.state);
        order.sort_by_key(|&i| state.failed[i]);
        order
    }

    /// Tries each host in [`Self::order`]; the first connection made, or the last error.
    async fn walk(self: Arc<Self>) -> Result<(Client, JoinHandle<()>), Error> {
        let mut last = None;
        for i in self.order() {
            match self.attempt(i).await {
                Ok(made) => return Ok(made),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(Error::__private_api_timeout))
    }

    /// One connection attempt on host `i`, for at most the connect timeout; what it
    /// came to is noted.
    async fn attempt(&self, i: usize) -> Result<(Client, JoinHandle<()>), Error> {
        let attempt = self.configs[i].connect(self.tls.clone());
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(Ok((client, connection))) => {
                self.succeeded(i);
                let task = tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        tracing::warn!(error = %e, "postgres: connection ended");
                    }
                });
                Ok((client, task))
            }
            Ok(Err(e)) => {
                self.failed(i, Failed::Refused(Instant::now()), chain(&e));
                Err(e)
            }
            Err(_) => {
                let why = format!("no answer within {:?} (connect timeout)", self.timeout);
                self.failed(i, Failed::Silent(Instant::now()), why);
                // tokio-postgres makes no error of its own for a deadline kept by its
                // caller but this one (which its `postgres` crate uses too).
                Err(Error::__private_api_timeout())
            }
        }
    }

    fn succeeded(&self, i: usize) {
        let mut state = lock(&self.state);
        if state.failed[i].take().is_some() {
            tracing::info!(host = %self.labels[i], "postgres: host answers again");
        }
        state.why[i].clear();
        if state.current.map_or(true, |(current, _)| current != i) {
            state.current = Some((i, Instant::now()));
        }
    }

    fn failed(&self, i: usize, how: Failed, why: String) {
        let mut state = lock(&self.state);
        if state.failed[i].is_none() {
            tracing::warn!(host = %self.labels[i], why = %why, "postgres: cannot connect; \
                new connections try the other hosts first");
        }
        state.failed[i] = Some(how);
        state.why[i] = why;
    }
}

type Made<'a> = Pin<Box<dyn Future<Output = Result<(Client, JoinHandle<()>), Error>> + Send + 'a>>;

/// The pool's connector: one walk ([`Hosts::walk`]) per new connection, in a task of
/// its own.
pub(super) struct Connector(pub(super) Arc<Hosts>);

impl Connect for Connector {
    fn connect(&self, _: &Config) -> Made<'_> {
        let walk = tokio::spawn(self.0.clone().walk());
        Box::pin(async move {
            match walk.await {
                Ok(made) => made,
                Err(_) => Err(Error::__private_api_timeout()), // the runtime is stopping
            }
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(url: &str) -> Hosts {
        let tls = MakeRustlsConnect::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth(),
        );
        Hosts::new(&url.parse().unwrap(), tls, Duration::from_secs(1)).unwrap()
    }

    #[test]
    fn failed_hosts_go_last_and_silent_ones_after_refusing_ones() {
        let h = hosts("host=a,b,c,d");
        assert_eq!(h.order(), [0, 1, 2, 3]);
        let t = Instant::now();
        h.failed(0, Failed::Silent(t), "no answer".into());
        h.failed(
            1,
            Failed::Refused(t + Duration::from_millis(1)),
            "refused".into(),
        );
        h.failed(3, Failed::Refused(t), "refused".into());
        assert_eq!(h.order(), [2, 3, 1, 0]);
        assert!(!h.open());
        h.failed(2, Failed::Refused(t), "refused".into());
        assert!(h.open(), "every host failed");
        h.succeeded(2);
        assert!(!h.open());
        // A statement on a connection of the current host got no answer.
        let later = h.suspect(Instant::now());
        assert_eq!(h.order(), [3, 1, 0, 2], "the oldest silence first");
        assert!(h.open(), "the only host that answered went silent");
        h.succeeded(3);
        // A late answer-less statement on a connection to c (made before d was taken
        // up) does not blame d: connections made before d was taken up go.
        let since = h.suspect(later - Duration::from_millis(1));
        assert!(since >= later);
        assert_eq!(h.order(), [3, 1, 0, 2]);
        let why = h.why();
        assert!(
            why.starts_with("a:5432: no answer; ") && why.ends_with("; d:5432: "),
            "{why}"
        );
        for bad in [
            "host=a,b port=1,2,3",
            "host=a,b hostaddr=10.0.0.1 port=1",
            "dbname=x",
        ] {
            assert!(
                Hosts::new(&bad.parse().unwrap(), hosts("host=a").tls, Duration::ZERO).is_err()
            );
        }
    }
}
