//! One tokio-postgres configuration per host of a multi-host `postgres.url`
//! ([`per_host`]), so that each host can be tried, and timed, on its own (`connect`);
//! how a host is named in logs and errors ([`label`]).

use std::time::Duration;

use tokio_postgres::config::Host;
use tokio_postgres::Config;

/// `config` for its host `i` only (with its hostaddr and port), every other setting
/// as is, and `timeout` as the TCP connect's.
pub(super) fn per_host(config: &Config, i: usize, timeout: Duration) -> Config {
    let mut one = Config::new();
    if let Some(user) = config.get_user() {
        one.user(user);
    }
    if let Some(password) = config.get_password() {
        one.password(password);
    }
    if let Some(dbname) = config.get_dbname() {
        one.dbname(dbname);
    }
    if let Some(options) = config.get_options() {
        one.options(options);
    }
    if let Some(name) = config.get_application_name() {
        one.application_name(name);
    }
    if let Some(t) = config.get_tcp_user_timeout() {
        one.tcp_user_timeout(*t);
    }
    if let Some(interval) = config.get_keepalives_interval() {
        one.keepalives_interval(interval);
    }
    if let Some(retries) = config.get_keepalives_retries() {
        one.keepalives_retries(retries);
    }
    one.ssl_mode(config.get_ssl_mode())
        .ssl_negotiation(config.get_ssl_negotiation())
        .keepalives(config.get_keepalives())
        .keepalives_idle(config.get_keepalives_idle())
        .target_session_attrs(config.get_target_session_attrs())
        .channel_binding(config.get_channel_binding())
        .connect_timeout(timeout);
    match config.get_hosts().get(i) {
        Some(Host::Tcp(host)) => {
            one.host(host);
        }
        Some(Host::Unix(path)) => {
            one.host_path(path);
        }
        None => {}
    }
    if let Some(addr) = config.get_hostaddrs().get(i) {
        one.hostaddr(*addr);
    }
    let ports = config.get_ports();
    if let Some(port) = ports.get(i).or(ports.first()) {
        one.port(*port);
    }
    one
}

/// `host:port` of a one-host configuration (`host (hostaddr):port` with both).
pub(super) fn label(config: &Config) -> String {
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let addr = config.get_hostaddrs().first();
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => addr.map(ToString::to_string).unwrap_or_default(),
    };
    match (config.get_hosts().is_empty(), addr) {
        (false, Some(addr)) => format!("{host} ({addr}):{port}"),
        _ => format!("{host}:{port}"),
    }
}

/// `e` and its sources, as one line.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: &str = "host=a,b,c hostaddr=10.0.0.1,10.0.0.2,10.0.0.3 port=1,2,3 user=u \
        password=pw dbname=d options='-c x=1' application_name=app sslmode=require \
        sslnegotiation=direct connect_timeout=9 tcp_user_timeout=4 keepalives=0 \
        keepalives_idle=5 keepalives_interval=6 keepalives_retries=7 \
        target_session_attrs=read-write channel_binding=require load_balance_hosts=disable";

    #[test]
    fn a_host_keeps_every_other_setting() {
        let all: Config = ALL.parse().unwrap();
        let one = per_host(&all, 1, Duration::from_secs(9));
        let only_b: Config = ALL
            .replace("host=a,b,c", "host=b")
            .replace("hostaddr=10.0.0.1,10.0.0.2,10.0.0.3", "hostaddr=10.0.0.2")
            .replace("port=1,2,3", "port=2")
            .parse()
            .unwrap();
        assert_eq!(format!("{one:?}"), format!("{only_b:?}"));
        // Not in `Debug`: the password (redacted) and the TLS negotiation.
        assert_eq!(one.get_password(), Some(&b"pw"[..]));
        assert_eq!(one.get_ssl_negotiation(), all.get_ssl_negotiation());
        assert_eq!(label(&one), "b (10.0.0.2):2");
        let single: Config = "host=h port=5433".parse().unwrap();
        assert_eq!(
            label(&per_host(&single, 0, Duration::from_secs(1))),
            "h:5433"
        );
        let shared: Config = "host=x,y port=7".parse().unwrap();
        assert_eq!(
            per_host(&shared, 1, Duration::from_secs(1)).get_ports(),
            [7]
        );
    }
}
