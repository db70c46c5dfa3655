//! The one decoder of the replies of `lua/claim.lua` and `lua/peek.lua`: what a record
//! reply says ([`Record`]), decoded in one place for every caller (and the fuzz target).

use std::time::Duration;

use fred::prelude::Value;

use super::vouch::Vouched;
use super::{Acquired, StoreError};
use crate::idempotency::{Claim, StoredRecord};

/// A record reply of the claim or peek script, decoded.
#[derive(Debug)]
pub enum Record {
    /// The claim script took the lease.
    Acquired(Acquired),
    /// Completed (the record as stored: maybe sealed), leased by another token, or
    /// another fingerprint.
    Known(Claim<Acquired, StoredRecord>),
    /// No record (peek only).
    Absent,
    /// No record, in a slot that lost its data lately (vouched claims): in flight, as far
    /// as anyone can tell, for this long (`lua/claim.lua`, "Y").
    Young(Young),
}

/// A key absent from a slot whose epoch marker is younger than the quarantine.
#[derive(Debug, Clone, Copy)]
pub struct Young {
    /// How long the key counts as in flight.
    pub remaining: Duration,
    /// The marker's value: when the slot was seen without one (ms of Redis' clock).
    pub marker: i64,
    /// This claim found the marker missing and set it.
    pub found_missing: bool,
}

/// A lease that ran out with no completion, as a vouched claim found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lapsed {
    /// Its lock token: the lapsed holder's, under which its record is re-warmed if it
    /// completed in Postgres alone.
    pub holder: String,
    /// How long ago its lease ran out.
    pub over_for: Duration,
}

/// The one decoder of the replies of `claim.lua` and `peek.lua`.
pub(crate) fn decode_record_reply(
    script: &'static str,
    reply: Value,
) -> Result<Record, StoreError> {
    let bad = |detail: &str| StoreError::Protocol {
        script,
        detail: detail.to_string(),
    };
    let ms = |v: &Value, what: &str| {
        (v.as_i64())
            .map(|ms| Duration::from_millis(ms.max(0) as u64))
            .ok_or_else(|| bad(what))
    };
    let Value::Array(mut items) = reply else {
        return Err(bad("not an array"));
    };
    let tag = items.first().and_then(|v| v.as_bytes_str());
    match tag.as_deref() {
        Some("A") if items.len() == 3 || items.len() == 4 => Ok(Record::Acquired(Acquired {
            fence: (items[1].as_i64()).ok_or_else(|| bad("fence is not a number"))?,
            marker_age: ms(&items[2], "marker age is not a number")?,
            vouched: Vouched::NotAsked,
            after_lapse: items.len() == 4,
            lapsed: None,
        })),
        Some("P") if items.len() == 3 => {
            let over_for = ms(&items[2], "lapsed time is not a number")?;
            let holder = (items.swap_remove(1).into_string()).ok_or_else(|| bad("no token"))?;
            Ok(Record::Acquired(Acquired {
                fence: 0,
                marker_age: Duration::ZERO,
                vouched: Vouched::NotAsked,
                after_lapse: true,
                lapsed: Some(Lapsed { holder, over_for }),
            }))
        }
        Some("Y") if items.len() == 3 || items.len() == 4 => Ok(Record::Young(Young {
            remaining: ms(&items[1], "quarantine is not a number")?,
            marker: (items[2].as_i64()).ok_or_else(|| bad("marker is not a number"))?,
            found_missing: items.len() == 4,
        })),
        Some("C") if items.len() == 3 => {
            let remaining = ms(&items[2], "remaining ttl is not a number")?;
            let raw = (items.swap_remove(1).into_bytes()).ok_or_else(|| bad("no response"))?;
            let response = StoredRecord::decode(raw).map_err(StoreError::Corrupt)?;
            Ok(Record::Known(Claim::Completed {
                response,
                remaining,
            }))
        }
        Some("I") if items.len() == 2 => Ok(Record::Known(Claim::InFlight {
            remaining: ms(&items[1], "remaining lease is not a number")?,
        })),
        Some("M") => Ok(Record::Known(Claim::Mismatch)),
        Some("N") => Ok(Record::Absent),
        _ => Err(bad("unknown reply tag")),
    }
}
