//! The record table's rows as the rest of the store sees them: which record a statement
//! is about ([`RecordRef`]), what a key holds ([`Found`], [`PgClaim`], [`PgRecord`]),
//! what goes in ([`CompletedRecord`], [`stored_columns`]) and how the `state` and
//! `completer` columns read.

use std::time::Duration;

use bytes::Bytes;

use crate::idempotency::{Encoded, Expiry, Fingerprint, RecordId, Scope, StoredRecord};
use crate::store::StoreError;

/// Which record a statement is about.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    pub scope: Scope,
    pub id: RecordId,
    pub route: &'a str,
}

/// What Postgres holds for a key (unexpired records only).
#[derive(Debug)]
pub enum Found {
    Completed {
        fingerprint: Fingerprint,
        /// As stored: maybe sealed.
        response: StoredRecord,
        /// Time left before the record expires.
        remaining: Duration,
    },
    Leased {
        fingerprint: Fingerprint,
        /// Time left on the lease.
        remaining: Duration,
    },
}

/// The result of a claim in Postgres.
#[derive(Debug)]
pub enum PgClaim {
    /// This token holds the lease; `fence` is its fencing token. `after_lapse`: the
    /// lease was taken over from one that lapsed with no completion (its holder went
    /// away mid-call, so the key's outcome is unknown).
    Acquired { fence: i64, after_lapse: bool },
    /// Another record holds the key.
    Held(Found),
}

/// A record as Postgres holds it, for the admin API.
#[derive(Debug, Clone, Copy)]
pub struct PgRecord {
    pub completed: bool,
    pub status: Option<i16>,
    pub stored_bytes: i32,
    pub expires_in_ms: i64,
    pub lease_remaining_ms: Option<i64>,
    /// What the completer did with it (the `completer` column), if anything.
    pub completer: Option<CompleterMark>,
    /// Attempts the completer reserved for its resendable request.
    pub completer_attempts: Option<i32>,
    /// Whether a request is kept with its lease for the completer.
    pub request_kept: bool,
}

/// A row's `completer` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompleterMark {
    /// The completer holds (or held) the lease.
    Running,
    /// The completer completed it.
    Completed,
    /// The completer gave it up.
    GivenUp,
}

impl CompleterMark {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "running" => Some(Self::Running),
            "completed" => Some(Self::Completed),
            "given_up" => Some(Self::GivenUp),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Completed => "completed",
            Self::GivenUp => "given_up",
        }
    }
}

/// `status` of a row whose response is sealed (not an HTTP status, so a binary that
/// predates encryption refuses the row as corrupt instead of replaying it): `headers`
/// is empty and `body` holds the sealed record, the same bytes Redis holds.
pub const SEALED_STATUS: i16 = 0;

/// A completed response on its way to Postgres.
#[derive(Debug, Clone)]
pub struct CompletedRecord {
    pub scope: Scope,
    pub id: RecordId,
    pub route: String,
    pub fingerprint: Fingerprint,
    pub token: String,
    pub status: i16,
    pub headers: Bytes,
    pub body: Bytes,
    /// Replayed until then (the row's `replay_until`).
    pub expiry: Expiry,
    /// The trace of the execution (`TraceOrigin`'s bytes; the row's `origin`).
    pub origin: Option<[u8; 24]>,
    /// Whether its claim wrote a row to Postgres (written through, or taken there):
    /// the completion then updates that row. Without one (a claim Redis held alone),
    /// the key is expected to be free and the record is inserted as it is, the upsert
    /// serving only when a row turns out to be there ([`PgStore::complete_batch`]).
    ///
    /// [`PgStore::complete_batch`]: super::PgStore::complete_batch
    pub claimed_in_postgres: bool,
}

/// The `status`, `headers` and `body` columns of a response: its parts, or, when it
/// is `sealed`, [`SEALED_STATUS`], nothing, and the sealed bytes.
pub fn stored_columns(response: &Encoded, sealed: Option<Bytes>) -> (i16, Bytes, Bytes) {
    match sealed {
        Some(sealed) => (SEALED_STATUS, Bytes::new(), sealed),
        None => (
            response.compact.status.as_u16() as i16,
            response.header_block(),
            response.compact.body.clone(),
        ),
    }
}

/// A row's `state` column: the one place its text is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordState {
    Leased,
    Completed,
}

impl RecordState {
    pub fn parse(text: &str) -> Result<Self, StoreError> {
        match text {
            "leased" => Ok(Self::Leased),
            "completed" => Ok(Self::Completed),
            _ => Err(StoreError::Corrupt("record state")),
        }
    }
}
