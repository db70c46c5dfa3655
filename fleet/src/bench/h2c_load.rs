//! `idemgate-fleet bench h2c-load ...`: the closed-loop load client of the bench's h2c
//! rows (`loadtest/bench/bench.py`). h2load (nghttp2) sends the same headers on every
//! request, so it cannot give each first execution a key of its own; this client sends
//! the bench's request (`POST`, the 31-byte JSON body, `Authorization: Bearer
//! bench-tenant`, an `Idempotency-Key` chosen per request exactly as `wrk.lua` chooses
//! it) over CONNECTIONS h2c connections (prior knowledge, hyper's HTTP/2 client), with
//! STREAMS requests in flight on each, for SECONDS, and prints the JSON line `wrk.lua`
//! prints (latencies in µs, answers counted by kind).
//!
//! ```text
//! bench h2c-load URL unique PREFIX | replay PREFIX NKEYS
//!       [--connections C] [--streams M] [--seconds S] [--threads T]
//! ```

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};

const BODY: &[u8] = b"{\"amount\":100,\"currency\":\"eur\"}";
const TENANT: &str = "Bearer bench-tenant";
/// A request unanswered this long counts as a timeout (wrk's `--timeout 5s`).
const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Debug, PartialEq)]
enum Keys {
    /// A fresh key per request: PREFIX-<connection>-<stream>-<n>.
    Unique(String),
    /// A key drawn at random from PREFIX-0 .. PREFIX-(N-1).
    Replay(String, u64),
}

#[derive(Clone, Debug, PartialEq)]
struct Load {
    /// host:port
    addr: String,
    path: String,
    keys: Keys,
    connections: usize,
    streams: usize,
    seconds: u64,
    threads: usize,
}

fn parse(args: &[String]) -> Result<Load, String> {
    let url = args.first().ok_or("the URL is missing")?;
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("expected an http:// URL (got '{url}')"))?;
    let (addr, path) = rest.split_once('/').unwrap_or((rest, "v1/payments"));
    let word = |i: usize| {
        args.get(i)
            .cloned()
            .ok_or(format!("argument {i} is missing"))
    };
    let (keys, mut i) = match word(1)?.as_str() {
        "unique" => (Keys::Unique(word(2)?), 3),
        "replay" => {
            let n = word(3)?.parse().map_err(|_| "NKEYS must be a number")?;
            (Keys::Replay(word(2)?, n), 4)
        }
        other => return Err(format!("mode must be unique or replay (got '{other}')")),
    };
    let mut load = Load {
        addr: addr.to_string(),
        path: format!("/{}", if path.is_empty() { "v1/payments" } else { path }),
        keys,
        connections: 1,
        streams: 100,
        seconds: 5,
        threads: 2,
    };
    while i < args.len() {
        let value: u64 = (args.get(i + 1).and_then(|v| v.parse().ok()))
            .ok_or_else(|| format!("{} needs a number", args[i]))?;
        match args[i].as_str() {
            "--connections" => load.connections = value.max(1) as usize,
            "--streams" => load.streams = value.max(1) as usize,
            "--seconds" => load.seconds = value.max(1),
            "--threads" => load.threads = value.max(1) as usize,
            other => return Err(format!("unknown option '{other}'")),
        }
        i += 2;
    }
    Ok(load)
}

/// What one stream (or all of them, merged) saw.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u64>,
    bytes: u64,
    fresh: u64,
    replayed: u64,
    other: u64,
    status_4xx_5xx: u64,
    connect: u64,
    read: u64,
    timeout: u64,
}

impl Tally {
    fn merge(&mut self, o: Tally) {
        self.latencies_us.extend(o.latencies_us);
        self.bytes += o.bytes;
        self.fresh += o.fresh;
        self.replayed += o.replayed;
        self.other += o.other;
        self.status_4xx_5xx += o.status_4xx_5xx;
        self.connect += o.connect;
        self.read += o.read;
        self.timeout += o.timeout;
    }

    /// `wrk.lua`'s line.
    fn json(mut self, elapsed: Duration) -> String {
        self.latencies_us.sort_unstable();
        let l = &self.latencies_us;
        let pct = |p: f64| l.get(((l.len() as f64 * p) as usize).min(l.len().saturating_sub(1)));
        let pct = |p| pct(p).copied().unwrap_or(0);
        let n = l.len() as u64;
        let mean = l.iter().sum::<u64>() as f64 / n.max(1) as f64;
        let us = elapsed.as_micros() as u64;
        format!(
            "{{\"requests\":{n},\"duration_us\":{us},\"bytes\":{},\"rps\":{:.1},\
             \"lat_p50_us\":{},\"lat_p90_us\":{},\"lat_p99_us\":{},\"lat_p999_us\":{},\
             \"lat_max_us\":{},\"lat_mean_us\":{mean:.1},\"err_connect\":{},\"err_read\":{},\
             \"err_write\":0,\"err_status\":{},\"err_timeout\":{},\"ok_fresh\":{},\
             \"ok_replayed\":{},\"other_status\":{}}}",
            self.bytes,
            n as f64 / elapsed.as_secs_f64(),
            pct(0.5),
            pct(0.9),
            pct(0.99),
            pct(0.999),
            l.last().copied().unwrap_or(0),
            self.connect,
            self.read,
            self.status_4xx_5xx,
            self.timeout,
            self.fresh,
            self.replayed,
            self.other,
        )
    }
}

/// A small xorshift generator: replay keys at random without a dependency.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// One stream's loop: a request, its answer read to the end, the next request.
async fn stream(
    load: Load,
    mut send: SendRequest<Full<Bytes>>,
    id: (usize, usize),
    until: Instant,
) -> Tally {
    let mut tally = Tally::default();
    let mut seed = 0x9e37_79b9_7f4a_7c15 ^ ((id.0 as u64) << 32 | id.1 as u64 | 1);
    let uri = format!("http://{}{}", load.addr, load.path);
    let mut n = 0u64;
    while Instant::now() < until {
        n += 1;
        let key = match &load.keys {
            Keys::Unique(prefix) => format!("{prefix}-{}-{}-{n}", id.0, id.1),
            Keys::Replay(prefix, keys) => format!("{prefix}-{}", next_random(&mut seed) % keys),
        };
        let request = hyper::Request::post(&uri)
            .header("content-type", "application/json")
            .header("idempotency-key", key)
            .header("authorization", TENANT)
            .body(Full::new(Bytes::from_static(BODY)))
            .expect("a valid request");
        let started = Instant::now();
        let exchange = async {
            send.ready().await?;
            let response = send.send_request(request).await?;
            let (head, body) = response.into_parts();
            let body = body.collect().await?.to_bytes();
            Ok::<_, hyper::Error>((head, body.len()))
        };
        match tokio::time::timeout(TIMEOUT, exchange).await {
            Err(_) => tally.timeout += 1,
            Ok(Err(_)) => {
                tally.read += 1;
                if send.is_closed() {
                    return tally;
                }
            }
            Ok(Ok((head, len))) => {
                tally
                    .latencies_us
                    .push(started.elapsed().as_micros() as u64);
                tally.bytes += len as u64;
                let replayed = head
                    .headers
                    .get("idempotent-replayed")
                    .is_some_and(|v| v == "true");
                match head.status.as_u16() {
                    201 if replayed => tally.replayed += 1,
                    201 => tally.fresh += 1,
                    s => {
                        tally.other += 1;
                        tally.status_4xx_5xx += u64::from(s >= 400);
                    }
                }
            }
        }
    }
    tally
}

/// The JSON line, or why nothing could be measured (no h2c connection, no answer).
async fn run(load: Load) -> Result<String, String> {
    let started = Instant::now();
    let until = started + Duration::from_secs(load.seconds);
    let mut total = Tally::default();
    let mut streams = Vec::new();
    for c in 0..load.connections {
        let connected = async {
            let tcp = tokio::net::TcpStream::connect(&load.addr).await.ok()?;
            tcp.set_nodelay(true).ok()?;
            let builder = hyper::client::conn::http2::Builder::new(TokioExecutor::new());
            builder.handshake(TokioIo::new(tcp)).await.ok()
        };
        let Some((send, connection)) = connected.await else {
            total.connect += 1;
            continue;
        };
        tokio::spawn(connection);
        for s in 0..load.streams {
            streams.push(tokio::spawn(stream(
                load.clone(),
                send.clone(),
                (c, s),
                until,
            )));
        }
    }
    if streams.is_empty() {
        return Err(format!(
            "no h2c connection to {} could be opened",
            load.addr
        ));
    }
    for s in streams {
        if let Ok(t) = s.await {
            total.merge(t);
        }
    }
    if total.latencies_us.is_empty() {
        return Err(format!("no request to {} was answered over h2c", load.addr));
    }
    Ok(total.json(started.elapsed()))
}

/// `idemgate-fleet bench h2c-load ARGS`: prints the JSON line.
pub fn main(args: &[String]) -> Result<(), String> {
    let load = parse(args).map_err(|e| format!("{e} (usage: fleet/src/bench/h2c_load.rs)"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(load.threads)
        .enable_all()
        .build()
        .map_err(|e| format!("no tokio runtime: {e}"))?;
    println!("{}", runtime.block_on(run(load))?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn arguments_parse() {
        let l = parse(&args(
            "http://127.0.0.1:18011 replay r 5000 --connections 2 --streams 50",
        ))
        .unwrap();
        assert_eq!(l.addr, "127.0.0.1:18011");
        assert_eq!(l.path, "/v1/payments");
        assert_eq!(l.keys, Keys::Replay("r".into(), 5000));
        assert_eq!((l.connections, l.streams, l.seconds), (2, 50, 5));
        let l = parse(&args("http://h:1/URL_UP unique p --seconds 3")).unwrap();
        assert_eq!((l.path.as_str(), l.seconds), ("/URL_UP", 3));
        assert_eq!(l.keys, Keys::Unique("p".into()));
        assert!(parse(&args("http://h:1 sometimes p")).is_err());
        assert!(parse(&args("http://h:1 unique p --streams")).is_err());
        assert!(parse(&args("h:1 unique p")).is_err());
    }
}
