//! What encryption at rest costs per record: encoding a stored response for the stores
//! without and with `[encryption]` (first execution), and decoding it back (replay),
//! for typical response sizes. Run in release:
//! `cargo run --release --example seal_cost`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use idemgate::idempotency::{
    Binding, Keyring, RecordId, Scope, Sealing, StoredRecord, StoredResponse,
};

fn main() {
    let dir = std::env::temp_dir().join(format!("idemgate-seal-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("k1");
    std::fs::write(&file, "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n").unwrap();
    let ring = Keyring::from_files(&[("k1".into(), file)], "k1", true).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let (on, off) = (Sealing::new(Some(ring)), Sealing::default());
    let at = Binding {
        scope: Scope::from_hex(&"ab".repeat(32)).unwrap(),
        record: RecordId::from_hex(&"cd".repeat(32)).unwrap(),
    };

    println!("body     store: plain  sealed   (+)      replay: plain  opened   (+)");
    for size in [256usize, 1024, 4096, 16384, 65536] {
        let response = sample(size);
        let plain = response.encode();
        let sealed = on.seal(&plain, at).unwrap();
        // First execution: the bytes both tiers store (the response is encoded once,
        // then sealed from that encoding when encryption is on).
        let store_plain = per_op(|| {
            let encoded = response.encode();
            black_box(off.seal(&encoded, at).unwrap_or(encoded))
        });
        let store_sealed = per_op(|| {
            let encoded = response.encode();
            black_box(on.seal(&encoded, at))
        });
        // Replay: the stored bytes back into a response.
        let replay_plain = per_op(|| {
            let record = StoredRecord::decode(plain.clone()).unwrap();
            black_box(off.open(record, at).unwrap())
        });
        let replay_open = per_op(|| {
            let record = StoredRecord::decode(sealed.clone()).unwrap();
            black_box(on.open(record, at).unwrap())
        });
        println!(
            "{:>6} B  {:>9} {:>8} {:>8}  {:>12} {:>8} {:>8}",
            size,
            us(store_plain),
            us(store_sealed),
            us(store_sealed.saturating_sub(store_plain)),
            us(replay_plain),
            us(replay_open),
            us(replay_open.saturating_sub(replay_plain)),
        );
    }
}

/// A JSON response of `body` bytes with the headers a payments API sends.
fn sample(body: usize) -> StoredResponse {
    let mut h = HeaderMap::new();
    h.append("content-type", HeaderValue::from_static("application/json"));
    h.append("x-request-cost", HeaderValue::from_static("7"));
    h.append("cache-control", HeaderValue::from_static("no-store"));
    h.append(
        "location",
        HeaderValue::from_static("/v1/payments/pay_8f2c1e0d9b"),
    );
    h.append(
        "x-trace",
        HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
    );
    let body = Bytes::from(vec![b'x'; body]);
    StoredResponse::from_upstream(StatusCode::CREATED, &h, body)
}

/// Mean time of one call, over about half a second.
fn per_op<T>(mut f: impl FnMut() -> T) -> Duration {
    for _ in 0..1000 {
        black_box(f());
    }
    let (mut n, started) = (0u32, Instant::now());
    while started.elapsed() < Duration::from_millis(500) {
        for _ in 0..100 {
            black_box(f());
        }
        n += 100;
    }
    started.elapsed() / n
}

fn us(d: Duration) -> String {
    format!("{:.2}µs", d.as_secs_f64() * 1e6)
}
