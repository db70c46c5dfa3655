//! How the writer cuts batches and settles them.
//!
//! A batch is bounded in records (`postgres.batch_max`) and in bytes
//! ([`MAX_BATCH_BYTES`]): Postgres takes at most 1 GB of parameters in one message, and
//! one oversized statement would fail whole, and again on every retry.
//!
//! When Postgres refuses a batch because of what it carries (one record it will never
//! take: a constraint, a value a column cannot hold, a trigger), the batch is written
//! again one record at a time: the others are written, and a record refused on its own
//! is given up, counted and logged, instead of being retried at the head of the queue
//! forever. Failures that are about Postgres itself rather than
//! the records (down, read-only, out of disk or connections, cancelled, a schema or
//! permission problem) leave the records to be retried as they are.

use std::collections::HashSet;

use super::Shared;
use crate::metrics;
use crate::store::postgres::CompletedRecord;
use crate::store::StoreError;

/// Most bytes (bodies, headers and the rest, roughly) one write-through statement carries;
/// a single larger record still goes, alone.
pub const MAX_BATCH_BYTES: usize = 16 << 20;

/// About what `record` adds to a statement's parameters.
fn record_bytes(record: &CompletedRecord) -> usize {
    // scope, key hash and fingerprint (32 bytes each), status, ttl, array framing.
    const FIXED: usize = 3 * 32 + 2 + 8 + 9 * 4;
    FIXED + record.route.len() + record.token.len() + record.headers.len() + record.body.len()
}

/// Which of `records`, in order, go in the next statement: up to `max_records` and
/// [`MAX_BATCH_BYTES`] (at least one), never one key twice (a statement cannot touch a
/// row twice). A record of a key already in the batch, or of a key left out, waits for a
/// later round, so that each key's writes stay in order.
pub fn pick<'a>(
    records: impl IntoIterator<Item = &'a CompletedRecord>,
    max_records: usize,
) -> Vec<bool> {
    let (mut seen, mut count, mut bytes) = (HashSet::new(), 0, 0);
    records
        .into_iter()
        .map(|r| {
            let size = record_bytes(r);
            let fits = count < max_records && (count == 0 || bytes + size <= MAX_BATCH_BYTES);
            let first = seen.insert(*r.id.as_bytes());
            let taken = first && fits;
            if taken {
                count += 1;
                bytes += size;
            }
            taken
        })
        .collect()
}

/// Whether Postgres refused a statement because of what it carried, so that one of its
/// records may be at fault: it answered with an error whose SQLSTATE class is not one
/// about the server itself (connection 08, unsupported 0A, transaction state 25 as on a
/// read-only standby, authorization 28, missing database 3D, rollback 40, schema or
/// privileges 42, resources 53, object state 55, operator intervention 57 including
/// cancels, system 58, snapshot 72, configuration F0, foreign data HV, internal XX).
pub fn refused(e: &StoreError) -> bool {
    let StoreError::Pg(e) = e else {
        return false;
    };
    let Some(db) = e.as_db_error() else {
        return false;
    };
    let class = db.code().code().get(..2).unwrap_or("");
    !matches!(
        class,
        "08" | "0A"
            | "25"
            | "28"
            | "3D"
            | "40"
            | "42"
            | "53"
            | "55"
            | "57"
            | "58"
            | "72"
            | "F0"
            | "HV"
            | "XX"
    )
}

/// How a batch ended: for a prefix of it, in order, each record's settlement (written
/// or not, or the refusal it was given up with); and, when that prefix is not the whole
/// batch, the failure that left the rest to be retried.
pub struct Settled {
    pub each: Vec<Result<bool, StoreError>>,
    pub failing: Option<StoreError>,
}

impl Shared {
    /// Writes `records` in one statement, or, when Postgres refuses it for what it
    /// carries, one record at a time (see the module docs). Refused records are counted
    /// and logged here; every failed statement counts as a write-through failure.
    pub(super) async fn settle(&self, records: &[CompletedRecord]) -> Settled {
        let first = match self.pg.complete_batch(records).await {
            Ok(written) => {
                return Settled {
                    each: written.into_iter().map(Ok).collect(),
                    failing: None,
                }
            }
            Err(e) => e,
        };
        self.failed_statement();
        if !refused(&first) {
            return Settled {
                each: Vec::new(),
                failing: Some(first),
            };
        }
        if let [record] = records {
            self.give_up(record, &first);
            return Settled {
                each: vec![Err(first)],
                failing: None,
            };
        }
        let mut each = Vec::with_capacity(records.len());
        for record in records {
            match self.pg.complete_batch(std::slice::from_ref(record)).await {
                Ok(written) => each.push(Ok(written.first().copied().unwrap_or(false))),
                Err(e) if refused(&e) => {
                    self.failed_statement();
                    self.give_up(record, &e);
                    each.push(Err(e));
                }
                Err(e) => {
                    self.failed_statement();
                    return Settled {
                        each,
                        failing: Some(e),
                    };
                }
            }
        }
        Settled {
            each,
            failing: None,
        }
    }

    fn failed_statement(&self) {
        self.failures
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        metrics::write_failure();
    }

    /// Counts and logs a record Postgres refused on its own: its durable copy is given up.
    fn give_up(&self, record: &CompletedRecord, e: &StoreError) {
        self.dropped
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        metrics::write_dropped(metrics::DropReason::Refused);
        let sqlstate = match e {
            StoreError::Pg(e) => e.code().map_or("", |c| c.code()),
            _ => "",
        };
        tracing::error!(key_hash = %record.id.short(), sqlstate, "postgres refused a stored \
            response; giving up its durable copy (it exists only in redis)");
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::idempotency::{Fingerprint, RecordId, Scope};

    fn record(key: &str, body: usize) -> CompletedRecord {
        let scope = Scope::anonymous("r", &[], None);
        let key = crate::idempotency::key::parse(key.as_bytes(), 255).unwrap();
        CompletedRecord {
            scope,
            id: RecordId::new(scope, &key, None),
            route: "r".into(),
            fingerprint: Fingerprint::new(
                &Default::default(),
                &http::Method::POST,
                &"/".parse().unwrap(),
                &http::HeaderMap::new(),
                b"",
            ),
            token: "t".into(),
            status: 201,
            headers: Bytes::new(),
            body: Bytes::from(vec![0u8; body]),
            expiry: crate::idempotency::Expiry::within(std::time::Duration::from_millis(1)),
            origin: None,
            claimed_in_postgres: false,
        }
    }

    #[test]
    fn batches_are_bounded_in_records_and_bytes() {
        let small: Vec<_> = (0..5).map(|i| record(&format!("s{i}"), 10)).collect();
        assert_eq!(pick(&small, 3), [true, true, true, false, false]);
        let big: Vec<_> = (0..4).map(|i| record(&format!("b{i}"), 6 << 20)).collect();
        assert_eq!(pick(&big, 256), [true, true, false, false]);
        // One record over the bound still goes, alone.
        let huge = [record("h", 20 << 20), record("s", 10)];
        assert_eq!(pick(&huge, 256), [true, false]);
    }

    #[test]
    fn a_key_waits_behind_its_own_earlier_record() {
        let (a, b) = (record("a", 10 << 20), record("b", 10 << 20));
        let again = record("a", 10);
        // "b" does not fit; "a" again must not overtake the "a" in the batch, and a
        // record after a left-out one of the same key waits too.
        assert_eq!(pick([&a, &b, &again], 256), [true, false, false]);
        assert_eq!(pick([&b, &a, &a.clone()], 256), [true, false, false]);
    }
}
