//! Live keyed streaming (`streaming = "live"`, the default): a keyed first execution
//! whose upstream answers a stream (SSE, gRPC, no `Content-Length`) reaches its client
//! as it arrives, is recorded on the way and replayed whole afterwards, and duplicates
//! on any replica join it while it runs. Real servers only: Redis, the SSE upstream of
//! `support/sse_upstream.rs` or the grpcio server of `tests/grpc/`, gateways in-process
//! and as `idemgate serve` processes; every test counts the upstream's executions (one
//! per key). One client (`sse.rs`) and its pace (`pace.rs`), which answers stream
//! (`kinds.rs`), joiners (`join.rs`), tenants, encryption and Redis Cluster
//! (`isolation.rs`), gRPC (`grpc.rs`), the upstream breaking off (`cut.rs`), the
//! route's timeout and deadline (`deadlines.rs`), the replica running a stream
//! SIGKILLed (`kill.rs`), Postgres and Redis outages
//! (`durable.rs`), SSE resume by `Last-Event-ID` (`resume.rs`), a stream meeting a
//! stop, an invalidation or a takeover (`lifecycle.rs`), and one that lasts longer than
//! its `ttl` or a waiter's place (`over_time.rs`).

mod cut;
mod deadlines;
mod durable;
mod grpc;
mod isolation;
mod join;
mod kill;
mod kinds;
mod lifecycle;
mod over_time;
mod pace;
mod resume;
mod sse;

use std::path::Path;
use std::time::{Duration, Instant};

use idemgate::Config;
use idemgate_fleet::Replica;
use reqwest::header::HeaderMap;
use reqwest::RequestBuilder;

use crate::support::{
    eventually, keyed_post, pattern_subscribers, serve_process, until_subscribed,
};
use crate::support::{RedisServer, SseUpstream, TestApp};

/// What a gateway of these tests has beyond its Redis and its upstream.
#[derive(Clone, Copy)]
struct Knobs<'a> {
    /// Keys of `[server]`.
    server: &'a str,
    /// Keys of the route's `[routes.idempotency]` ([`WAIT`] by default).
    route: &'a str,
    /// `redis.command_timeout`: generous (Redis may be slow under the test load), or
    /// small enough for a short `lock_ttl` (at least 3 x this).
    command_timeout: &'a str,
}

/// Duplicates wait (join) for up to 30 s, longer than any stream here.
const WAIT: &str = "in_flight = \"wait\"\nwait_timeout = \"30s\"\n";

const KNOBS: Knobs = Knobs {
    server: "",
    route: WAIT,
    command_timeout: "2s",
};

/// The configuration after the `[server]` header: Redis, no replay cache, anonymous
/// requests in one shared scope, `route` (a `[[routes]]` table, its
/// `[routes.idempotency]` open for the knobs' keys).
fn gateway_toml(redis: &str, route: &str, knobs: Knobs) -> String {
    format!(
        "{server}\n[replay_cache]\nmax_bytes = \"0B\"\n\
         [redis]\nurl = \"{redis}\"\ncommand_timeout = \"{command}\"\nconnect_timeout = \"1s\"\n\
         [idempotency]\nanonymous = \"shared\"\n\
         {route}{extra}",
        server = knobs.server,
        command = knobs.command_timeout,
        extra = knobs.route,
    )
}

/// The SSE route: `/v1/` to `upstream`, its `[routes.idempotency]` table open.
fn sse_route(upstream: &SseUpstream) -> String {
    format!(
        "[[routes]]\nname = \"stream\"\npath_prefix = \"/v1/\"\nupstream = \"{}\"\n\
         upstream_timeout = \"30s\"\n[routes.idempotency]\n",
        upstream.url()
    )
}

/// The configuration of a gateway in-process on the Redis at `redis`.
fn config(redis: &str, route: &str, knobs: Knobs) -> Config {
    let toml = format!("[server]\n{}", gateway_toml(redis, route, knobs));
    Config::from_toml(&toml).unwrap_or_else(|e| panic!("test config: {e}"))
}

/// A gateway in-process.
async fn gateway(redis: &RedisServer, route: &str, knobs: Knobs<'_>) -> TestApp {
    TestApp::spawn(config(&redis.url(), route, knobs)).await
}

/// Two gateways in-process on one Redis (two replicas of one fleet), their wake-up
/// subscriptions settled.
async fn replicas(redis: &RedisServer, route: &str, knobs: Knobs<'_>) -> (TestApp, TestApp) {
    let before = pattern_subscribers(redis);
    let pair = (
        gateway(redis, route, knobs).await,
        gateway(redis, route, knobs).await,
    );
    until_subscribed(redis, before + 2).await;
    pair
}

/// A gateway as an `idemgate serve` process (one that can be SIGKILLed), ready.
async fn gateway_process(
    dir: &Path,
    name: &str,
    redis: &RedisServer,
    route: &str,
    knobs: Knobs<'_>,
) -> Replica {
    serve_process(dir, name, &gateway_toml(&redis.url(), route, knobs)).await
}

fn base(app: &TestApp) -> String {
    format!("http://{}", app.addr)
}

/// A keyed POST of `{}` to `<base>/v1/stream?<query>` (the query tells the SSE
/// upstream what to send).
fn post(http: &reqwest::Client, base: &str, key: &str, query: &str) -> RequestBuilder {
    keyed_post(http, format!("{base}/v1/stream?{query}"), key, "{}")
}

/// How a response body ended.
#[derive(Debug, PartialEq)]
enum End {
    /// Still being read.
    Open,
    /// Its proper end (the last chunk).
    Clean,
    /// An error while reading it: the connection closed or the stream was reset first.
    Aborted(String),
    /// The client dropped it.
    Left,
    /// Nothing more came within the time given.
    Stalled,
}

/// A response read as it arrives, with when each part of it came.
struct Streamed {
    /// When the request was sent.
    sent: Instant,
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
    /// When the body first held each complete event (up to its `\n\n`), in order.
    events_at: Vec<Instant>,
    end: End,
    /// When it ended (or was left).
    ended: Option<Instant>,
    response: Option<reqwest::Response>,
}

impl Streamed {
    /// Sends `request` and waits for its head (for at most `within`).
    async fn open(request: RequestBuilder, within: Duration) -> Self {
        let sent = Instant::now();
        let response = tokio::time::timeout(within, request.send())
            .await
            .unwrap_or_else(|_| panic!("no response head within {within:?}"))
            .expect("a response head");
        Self {
            sent,
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            body: Vec::new(),
            events_at: Vec::new(),
            end: End::Open,
            ended: None,
            response: Some(response),
        }
    }

    /// Sends `request` and reads its whole body (for at most `within` in all).
    async fn whole(request: RequestBuilder, within: Duration) -> Self {
        let mut streamed = Self::open(request, within).await;
        streamed.read(usize::MAX, within).await;
        streamed
    }

    /// Reads until the body holds `events` events, or it ends, or `within` passes.
    async fn read(&mut self, events: usize, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.end == End::Open && self.events_at.len() < events {
            let response = self.response.as_mut().unwrap();
            let end = match tokio::time::timeout_at(deadline, response.chunk()).await {
                Err(_) => return,
                Ok(Ok(Some(chunk))) => {
                    self.arrived(&chunk);
                    continue;
                }
                Ok(Ok(None)) => End::Clean,
                Ok(Err(e)) => End::Aborted(format!("{e:?}")),
            };
            (self.end, self.ended) = (end, Some(Instant::now()));
            self.response = None;
        }
    }

    /// Reads to the end of the body (for at most `within`: else it stalled).
    async fn finish(&mut self, within: Duration) {
        self.read(usize::MAX, within).await;
        if self.end == End::Open {
            (self.end, self.ended) = (End::Stalled, Some(Instant::now()));
        }
    }

    /// Drops the response: the client goes away.
    fn leave(&mut self) {
        self.response = None;
        (self.end, self.ended) = (End::Left, Some(Instant::now()));
    }

    fn arrived(&mut self, chunk: &[u8]) {
        let now = Instant::now();
        // Only the new bytes (and the one before them) can end an event.
        let from = self.body.len().saturating_sub(1);
        self.body.extend_from_slice(chunk);
        let events = self.body[from..]
            .windows(2)
            .filter(|w| w == b"\n\n")
            .count();
        self.events_at.extend(std::iter::repeat(now).take(events));
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

/// `later - earlier`, or zero when `later` came first.
fn since(later: Instant, earlier: Instant) -> Duration {
    later.saturating_duration_since(earlier)
}

/// Waits (at most 10 s) until the upstream has sent `events` events of the first
/// execution of `key`.
async fn upstream_sent(upstream: &SseUpstream, key: &str, events: usize) {
    let sent = eventually(Duration::from_secs(10), async || {
        (upstream.of(key).first()).is_some_and(|e| e.sent.len() >= events)
    })
    .await;
    assert!(sent, "the upstream did not send {events} events of {key}");
}

/// Waits (at most 5 s) until Redis holds records and every one is completed (a
/// retry then replays, rather than joins).
async fn stored(redis: &RedisServer) {
    let completed = eventually(Duration::from_secs(5), async || {
        let states = redis.record_states().await;
        !states.is_empty() && states.iter().all(|(_, s)| s.as_deref() == Some("C"))
    })
    .await;
    assert!(
        completed,
        "no completed record: {:?}",
        redis.record_states().await
    );
}
