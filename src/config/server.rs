//! The gateway process's own sections and their rules: `[server]` (listeners, limits,
//! timeouts, trusted proxies, the runtime), `[admin]` (the admin API's token) and
//! `[log]`.

use std::net::SocketAddr;
use std::time::Duration;

use bytesize::ByteSize;
use serde::{Deserialize, Serialize};

use super::cidr::TrustedProxies;
use super::error::{positive_duration, positive_size, ConfigError};
use super::runtime::{Runtime, Workers};
use super::share::Share;
use super::tls::ListenerTls;
use super::typed;

/// `[server]`: listeners and limits of the HTTP edge.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address for proxied traffic.
    #[serde(with = "typed")]
    pub listen: SocketAddr,
    /// Address for `/healthz` and `/readyz`.
    #[serde(with = "typed")]
    pub admin_listen: SocketAddr,
    /// Largest request body read for a keyed request; larger is 413.
    pub max_request_body: ByteSize,
    /// Largest upstream response body the gateway buffers and stores.
    pub max_response_body: ByteSize,
    /// Largest request head (request line plus headers) a client may send; on HTTP/2, the
    /// largest header list of a stream (`SETTINGS_MAX_HEADER_LIST_SIZE`, 431 beyond it).
    pub max_header_size: ByteSize,
    /// How long a client may take to send its request head (slowloris guard); also how
    /// long a new connection may take to send the bytes that tell HTTP/1.1 from HTTP/2,
    /// or, with `[server.tls]`, to finish its TLS handshake (and send the HTTP/2 preface
    /// after ALPN `h2`).
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// How long a client may take to send the body of a keyed request; slower is 408.
    #[serde(with = "humantime_serde")]
    pub body_read_timeout: Duration,
    /// Lingering close: after answering before the request body was read (413, 408, an
    /// early error), read and discard up to this many more bytes of it, so the client
    /// sees the answer instead of a reset. `0B` turns lingering off. HTTP/1 only: an
    /// HTTP/2 stream answered early is ended with `RST_STREAM` `NO_ERROR` instead.
    pub linger_bytes: ByteSize,
    /// Lingering close: the longest the rest of a body is read and discarded for.
    #[serde(with = "humantime_serde")]
    pub linger_time: Duration,
    /// How long a stop (SIGTERM/SIGINT) may take: in-flight requests may finish until a
    /// quarter of it (at most 5 s) is left; then the keyed upstream calls still running
    /// are cancelled and settle their keys (`idempotency.on_ambiguous`), and the
    /// connections still open are closed (docs/guarantees.md, "A stop").
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Peers (CIDRs) whose `X-Forwarded-*` and `Forwarded` headers are extended; from
    /// any other peer they are replaced. Empty: nobody is trusted.
    pub trusted_proxies: TrustedProxies,
    /// Most connections open on the proxy listener; beyond it, new connections wait in
    /// the kernel's accept queue, unserved, until one closes. An HTTP/2 connection takes
    /// one, whatever its streams.
    pub max_connections: usize,
    /// Most requests (HTTP/2 streams included) being handled at once on the proxy
    /// listener; beyond it, 503 `overloaded` with `Retry-After`.
    pub max_concurrent_requests: usize,
    /// Longest a response write may wait for the client to read (no progress at all);
    /// then the connection is closed and the response it held freed.
    #[serde(with = "humantime_serde")]
    pub write_timeout: Duration,
    /// Memory for buffered bodies (keyed request bodies, stored and replayed responses)
    /// across all requests; a keyed request that does not fit gets 503 `overloaded`.
    pub buffer_budget: ByteSize,
    /// The most one connection may hold of `max_concurrent_requests` and of
    /// `buffer_budget` (rounded up; at least one request, and at least
    /// `max_request_body` + `max_response_body` of the budget), so that one client,
    /// whatever it opens on its connection (HTTP/2 streams, detached upstream calls,
    /// unread answers), leaves the rest to the others; beyond it, that connection's
    /// requests get 503 `overloaded`. A load balancer that multiplexes many clients onto
    /// few HTTP/2 connections to the gateway may need `100%`.
    pub connection_share: Share,
    /// How long a connection may stay open with no request on it (an HTTP/1.1
    /// keep-alive connection between requests, an HTTP/2 connection with no open
    /// stream: its PINGs are not activity) before it is closed (HTTP/2: `GOAWAY` first),
    /// giving back its `max_connections` slot. The default is longer than the idle
    /// timeouts of the common load balancers in front (AWS ALB 60 s, nginx's upstream
    /// `keepalive_timeout` 60 s, Google Cloud's 600 s backend keep-alive), so a balancer
    /// closes an idle connection before the gateway does and never sends a request on
    /// one the gateway is closing.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// `multi_thread` or `thread_per_core` ([`Runtime`]).
    pub runtime: Runtime,
    /// Worker threads: `"auto"` (the available cores) or a count ([`Workers`]).
    pub workers: Workers,
    /// HTTP/2 (h2c with prior knowledge, on `listen` and `admin_listen` beside HTTP/1.1;
    /// with `[server.tls]`, ALPN `h2` on `listen`):
    /// most streams a client may have open at once on one connection (the
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` the gateway announces). Each stream is a request
    /// and meets `max_concurrent_requests`, `buffer_budget` and the body limits as an
    /// HTTP/1.1 request does; the header list of each is bounded by `max_header_size`.
    pub http2_max_concurrent_streams: u32,
    /// HTTP/2: the flow-control window of each stream, how much request body a client may
    /// send on a stream before the gateway reads it. Between 64KiB and 2GiB - 1 byte.
    pub http2_initial_stream_window: ByteSize,
    /// HTTP/2: the flow-control window of a whole connection, across its streams: the most
    /// unread request body one connection can hold. At least `http2_initial_stream_window`,
    /// at most 2GiB - 1 byte.
    pub http2_initial_connection_window: ByteSize,
    /// HTTP/2 rapid reset guard (CVE-2023-44487): most streams a client may open and reset
    /// before the gateway has started on them; beyond it the connection is closed with
    /// `GOAWAY` `ENHANCE_YOUR_CALM`.
    pub http2_max_pending_accept_reset_streams: usize,
    /// HTTP/2: most streams the gateway may reset on one connection because the client
    /// broke the protocol on them (a reset flood provoked from the client's side); beyond
    /// it the connection is closed with `GOAWAY` `ENHANCE_YOUR_CALM`.
    pub http2_max_local_error_reset_streams: usize,
    /// HTTP/2: most streams a client may reset (or abandon) per minute on one connection
    /// after the gateway accepted them (a token bucket of this size, refilled over a
    /// minute); beyond it the connection gets `GOAWAY` and is closed once its streams
    /// end. An upstream call already started goes on, holding its
    /// `max_concurrent_requests` slot.
    pub http2_max_reset_streams: u32,
    /// HTTP/2: how often an HTTP/2 connection is pinged to find a peer that is gone;
    /// `0s` turns pings off.
    #[serde(with = "humantime_serde")]
    pub http2_keep_alive_interval: Duration,
    /// HTTP/2: how long a ping may go unanswered before the connection is closed.
    #[serde(with = "humantime_serde")]
    pub http2_keep_alive_timeout: Duration,
    pub tls: ListenerTls,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
            max_request_body: ByteSize::mib(1),
            max_response_body: ByteSize::mib(8),
            max_header_size: ByteSize::kib(16),
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            linger_bytes: ByteSize::mib(8),
            linger_time: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(30),
            trusted_proxies: TrustedProxies::default(),
            max_connections: 4096,
            max_concurrent_requests: 1024,
            write_timeout: Duration::from_secs(30),
            buffer_budget: ByteSize::mib(256),
            connection_share: Share::percent(25).expect("a share"),
            idle_timeout: Duration::from_secs(11 * 60),
            runtime: Runtime::default(),
            workers: Workers::default(),
            http2_max_concurrent_streams: 100,
            http2_initial_stream_window: ByteSize::kib(256),
            http2_initial_connection_window: ByteSize::mib(1),
            http2_max_pending_accept_reset_streams: 20,
            http2_max_local_error_reset_streams: 1024,
            http2_max_reset_streams: 200,
            http2_keep_alive_interval: Duration::from_secs(20),
            http2_keep_alive_timeout: Duration::from_secs(20),
            tls: ListenerTls::default(),
        }
    }
}

/// `[log]`: log format and filter.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `text` or `json`.
    pub format: LogFormat,
    /// A `tracing` filter directive such as `info` or `idemgate=debug`; `RUST_LOG` wins.
    pub filter: String,
    /// Lines the log writer thread may fall behind stderr by; beyond, lines are dropped
    /// (and counted) instead of making requests wait.
    pub queue_lines: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            filter: "info".into(),
            queue_lines: 64 * 1024,
        }
    }
}

/// Output format of the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line (the request span's fields under `span`).
    Json,
}

/// `[admin]`: the admin API on the admin listener.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Bearer token for `/admin/*`; absent means the admin API is off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// A file holding the token instead (`token` and `token_file` exclude each other).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_file: Option<std::path::PathBuf>,
}
impl ServerConfig {
    /// The bounds of `[server]`.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        positive_size("server.max_request_body", self.max_request_body.as_u64())?;
        positive_size("server.max_response_body", self.max_response_body.as_u64())?;
        if self.max_header_size.as_u64() < 8192 {
            return Err(ConfigError::invalid(
                "server.max_header_size",
                "must be at least 8KiB",
            ));
        }
        positive_duration("server.header_read_timeout", self.header_read_timeout)?;
        positive_duration("server.body_read_timeout", self.body_read_timeout)?;
        self.check_limits()?;
        self.check_http2()?;
        self.tls.check()
    }

    /// The `server.http2_*` settings.
    fn check_http2(&self) -> Result<(), ConfigError> {
        if self.http2_max_concurrent_streams == 0 {
            return Err(ConfigError::invalid(
                "server.http2_max_concurrent_streams",
                "must be at least 1",
            ));
        }
        const MAX_WINDOW: u64 = (1 << 31) - 1;
        let stream = self.http2_initial_stream_window.as_u64();
        let connection = self.http2_initial_connection_window.as_u64();
        if !(65_536..=MAX_WINDOW).contains(&stream) {
            return Err(ConfigError::invalid(
                "server.http2_initial_stream_window",
                "must be between 64KiB and 2GiB - 1 byte",
            ));
        }
        if !(stream..=MAX_WINDOW).contains(&connection) {
            return Err(ConfigError::invalid(
                "server.http2_initial_connection_window",
                "must be between server.http2_initial_stream_window and 2GiB - 1 byte",
            ));
        }
        if self.http2_max_pending_accept_reset_streams == 0 {
            return Err(ConfigError::invalid(
                "server.http2_max_pending_accept_reset_streams",
                "must be at least 1",
            ));
        }
        if self.http2_max_local_error_reset_streams == 0 {
            return Err(ConfigError::invalid(
                "server.http2_max_local_error_reset_streams",
                "must be at least 1",
            ));
        }
        if self.http2_max_reset_streams == 0 {
            return Err(ConfigError::invalid(
                "server.http2_max_reset_streams",
                "must be at least 1",
            ));
        }
        if !self.http2_keep_alive_interval.is_zero() {
            positive_duration(
                "server.http2_keep_alive_timeout",
                self.http2_keep_alive_timeout,
            )?;
        }
        Ok(())
    }

    /// `server.max_connections`, `max_concurrent_requests`, `write_timeout` and
    /// `buffer_budget`.
    fn check_limits(&self) -> Result<(), ConfigError> {
        if !(1..=1_000_000).contains(&self.max_connections) {
            return Err(ConfigError::invalid(
                "server.max_connections",
                "must be between 1 and 1000000",
            ));
        }
        if !(1..=1_000_000).contains(&self.max_concurrent_requests) {
            return Err(ConfigError::invalid(
                "server.max_concurrent_requests",
                "must be between 1 and 1000000",
            ));
        }
        positive_duration("server.write_timeout", self.write_timeout)?;
        positive_duration("server.idle_timeout", self.idle_timeout)?;
        let one = (self.max_request_body.as_u64()).saturating_add(self.max_response_body.as_u64());
        if self.buffer_budget.as_u64() < one {
            return Err(ConfigError::invalid(
                "server.buffer_budget",
                format!(
                    "must hold at least one request and its response: \
                     server.max_request_body + server.max_response_body ({one} bytes)"
                ),
            ));
        }
        Ok(())
    }
}

impl LogConfig {
    /// The bounds of `[log]`.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if !(1..=1 << 24).contains(&self.queue_lines) {
            return Err(ConfigError::invalid(
                "log.queue_lines",
                "must be between 1 and 16777216",
            ));
        }
        Ok(())
    }
}

impl AdminConfig {
    /// One token, given once, and long enough.
    pub(super) fn check(&self) -> Result<(), ConfigError> {
        if self.token.is_some() && self.token_file.is_some() {
            return Err(ConfigError::invalid(
                "admin.token_file",
                "set `admin.token` or `admin.token_file`, not both",
            ));
        }
        if let Some(token) = &self.token {
            if token.len() < 16 {
                return Err(ConfigError::invalid(
                    "admin.token",
                    "must be at least 16 characters (or absent to turn the admin API off)",
                ));
            }
        }
        Ok(())
    }
}
