//! Live answers' metrics (`crate::flow::live`): the keyed answers streaming live on
//! this replica, the duplicates joined to one, and how each join ended.

use metrics::{counter, gauge};

pub const LIVE_ANSWERS: &str = "idemgate_live_answers";
pub const LIVE_JOINERS: &str = "idemgate_live_joiners";
pub const LIVE_JOINS: &str = "idemgate_live_joins_total";

/// How a duplicate's join of a live answer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// It read the answer to its end from the live stream.
    Ended,
    /// The stream was gone before its end; the stored record gave the rest.
    FromRecord,
    /// Cut: the answer broke off, its replica died, or the stream could not be read.
    Cut,
    /// Its client left before the end.
    Left,
}

impl Join {
    pub fn as_str(self) -> &'static str {
        match self {
            Join::Ended => "ended",
            Join::FromRecord => "from_record",
            Join::Cut => "cut",
            Join::Left => "left",
        }
    }
}

pub(super) fn describe() {
    use metrics::{describe_counter, describe_gauge};
    describe_gauge!(
        LIVE_ANSWERS,
        "Keyed answers streaming live on this replica (forwarded as they come, recorded on the way)."
    );
    describe_gauge!(
        LIVE_JOINERS,
        "Duplicates on this replica joined to a live answer (in_flight = \"wait\")."
    );
    describe_counter!(
        LIVE_JOINS,
        "Joins of live answers by how they ended (ended, from_record, cut, left)."
    );
}

pub(super) fn start() {
    gauge!(LIVE_ANSWERS).set(0.0);
    gauge!(LIVE_JOINERS).set(0.0);
    for how in [Join::Ended, Join::FromRecord, Join::Cut, Join::Left] {
        counter!(LIVE_JOINS, "outcome" => how.as_str()).absolute(0);
    }
}

/// A live answer started (`+1`) or ended (`-1`).
pub fn live_answers(delta: f64) {
    gauge!(LIVE_ANSWERS).increment(delta);
}

/// A duplicate joined a live answer (`+1`), or its join ended (`-1`).
pub fn live_joiners(delta: f64) {
    gauge!(LIVE_JOINERS).increment(delta);
}

/// A join ended as `how`.
pub fn live_join_ended(how: Join) {
    counter!(LIVE_JOINS, "outcome" => how.as_str()).increment(1);
}
