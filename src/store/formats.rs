//! The stored formats and their versions, in one place: what a record written by one
//! release looks like to the next, during a rolling upgrade when two versions share one
//! Redis and one Postgres (docs/operations.md, Version policy; CHANGELOG.md).
//!
//! | format | version | carried by | where |
//! |---|---|---|---|
//! | Redis record | 3 (2 with `redis.record_format = "hash"`) | the key's type; a string's first byte | `lua/record.lua`, [`super::redis`] |
//! | response encoding | 1, 3 with trailers, 4 with its execution's trace | first byte | [`crate::idempotency::encoding`] |
//! | sealed envelope | 2 | first byte | [`crate::idempotency::sealed`] |
//! | Postgres schema | 9 | `idemgate_schema` rows | `migrations/`, [`super::postgres::migrate`] |
//!
//! Redis record layouts: 1 (0.1.0 to 0.3.0) is a hash `{s, f, t, n, r}`; 2 (0.4.0)
//! adds `w`, set by `claim.lua` when a duplicate was told "in flight", so completions
//! and releases publish a wake-up only then. Layout 2 reads layout 1 (a record without
//! `w` gets no wake-up: a duplicate told "in flight" by a layout-1 replica re-checks
//! when the lease it saw runs out, or gives up at its `wait_timeout`). Layout 3 (0.5.0)
//! is one string with the record's expiry, read with one `GET` and written with one
//! `SET ... PX`, so each script runs fewer Redis commands:
//!
//! | bytes | field |
//! |---|---|
//! | 1 | state, also the layout's tag: `L` leased, `C` completed |
//! | 1 | `w`: `1` once a duplicate was told "in flight", else `0` (`SETRANGE` flips it, keeping the TTL) |
//! | 1 + len | fingerprint (32 raw bytes), after one byte holding its length |
//! | 1 + len | lock token, likewise |
//! | 1 + len | fencing token (decimal; `0` when the claim kept no fence key), likewise |
//! | rest | the encoded response; while leased, empty, or (vouched claims) how long the record outlives its lease, ms (decimal) |
//!
//! A leased record with that rest (the hash's `r` in layout 2) is remembered past its
//! lease, so a lease that ran out with no completion is taken over knowingly. Readers
//! without it (earlier releases) ignore a leased record's rest and
//! count it in flight until the key expires: later, never sooner.
//!
//! Layout 3 reads layout 2 (a `GET` answers `WRONGTYPE` only for a hash: then `HMGET`).
//! The previous release reads hashes only, so layout 2 is still written while
//! `redis.record_format = "hash"` says so, for the length of a rolling upgrade.
//!
//! Postgres schema 4 (0.5.0, additive) keeps a completion's `lease_expires_at` (read
//! only while a row is leased) and lets the claim write the record's expiry; rows of
//! schema 3 (`lease_expires_at` NULL once completed) read the same. Schema 5 (0.5.0,
//! additive) adds `replay_until`, the moment a completed record stops being replayed
//! (`Idempotency-Expires`), which lookups and claims honour only while it is later than
//! the row's `completed_at`: a row the previous release completed (it leaves the column
//! as it was) keeps `expires_at`'s meaning. Schema 6 (additive) tunes the table's
//! autovacuum only. Schema 7 (additive) adds `after_lapse`, which only the claim
//! statement writes and reads back (a lease taken over after one that lapsed with no
//! completion); a row without it (the previous release's, NULL) reads as `false`, and
//! the previous release never reads it. Schema 8 (additive) adds the table
//! `idemgate_redis_epochs`, written only with `postgres.claims = "vouched"` and read in
//! every mode with `[postgres]` (a fleet may mix modes). Schema 9 (additive) adds
//! `origin`, the trace and span id of the execution that produced a completed row
//! (`[tracing]`), written by the write-through statement and read by lookups only; the
//! previous release neither writes nor reads it (a row it completes over one that had
//! an origin keeps that origin: a replay of it may link to the earlier execution).
//!
//! Response encoding 4 wraps 1 or 3 after the trace and span id of the execution. It
//! is written only while spans are exported (`[tracing]` has an endpoint), which the
//! previous release cannot do, and it cannot read it: the upgrade step (CHANGELOG.md)
//! is to turn `[tracing]` on once every replica runs this release.
//!
//! Response encoding 3 (0.5.0) adds the trailers: it is written only for a gRPC answer
//! with trailers (other responses' trailers are not stored), so only for a gRPC call
//! over HTTP/2, something 0.4.0 never received
//! (it speaks HTTP/1.1 only), so no record 0.4.0 could be asked to replay is in it.
//! Postgres holds its trailers after the header block in the same column, where 0.4.0
//! would not look. Each binary reads its own versions and the previous release's;
//! a version the previous release cannot read is written by default only with an
//! upgrade step in CHANGELOG.md: Redis layout 3 is the one so far (a rolling upgrade
//! from 0.4.0 runs the new replicas with `redis.record_format = "hash"` until no 0.4.0
//! replica is left, as `make upgrade-check` does).

use crate::idempotency::encoding::ENCODING_VERSION;
use crate::idempotency::sealed::SEALED_VERSION;

use super::postgres::migrate;

/// The Redis record layout this binary writes by default (`redis.record_format = "hash"`
/// writes 2).
pub const REDIS_RECORD: u32 = 3;

/// One stored format: the version this binary writes and the versions it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFormat {
    pub name: &'static str,
    pub writes: u32,
    pub reads: &'static [u32],
}

/// Every stored format, as `idemgate --version` prints them.
pub fn all() -> [StoredFormat; 4] {
    [
        StoredFormat {
            name: "redis record",
            writes: REDIS_RECORD,
            reads: &[1, 2, 3],
        },
        StoredFormat {
            name: "response encoding",
            writes: u32::from(ENCODING_VERSION),
            reads: &[1, 3, 4],
        },
        StoredFormat {
            name: "sealed envelope",
            writes: u32::from(SEALED_VERSION),
            reads: &[2],
        },
        StoredFormat {
            name: "postgres schema",
            writes: migrate::latest() as u32,
            reads: &[3, 4, 5, 6, 7, 8, 9],
        },
    ]
}

/// `redis record 3 (reads 1-3), response encoding 1, ...`: one line per format.
pub fn summary() -> String {
    let mut out = String::from("stored formats:");
    for format in all() {
        out.push_str(&format!("\n  {} {}", format.name, format.writes));
        if format.reads != [format.writes] {
            let reads: Vec<String> = format.reads.iter().map(u32::to_string).collect();
            out.push_str(&format!(" (reads {})", reads.join(", ")));
        }
    }
    out.push_str("\n  (postgres: also runs beside newer `.additive.sql` migrations)");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_format_reads_what_it_writes_and_the_summary_names_them_all() {
        for format in all() {
            assert!(format.reads.contains(&format.writes), "{format:?}");
        }
        let text = summary();
        for name in [
            "redis record 3 (reads 1, 2, 3)",
            "response encoding 1 (reads 1, 3, 4)",
            "sealed envelope 2",
        ] {
            assert!(text.contains(name), "{text}");
        }
        assert!(text.contains(&format!("postgres schema {}", migrate::latest())));
    }
}
