//! The completer's metrics: its passes, the abandoned requests it took over, and the
//! outcome of each attempt ([`COMPLETER_OUTCOME_NAMES`]).

use metrics::counter;

pub const COMPLETER_PASSES: &str = "idemgate_completer_passes_total";
pub const COMPLETER_TAKEOVERS: &str = "idemgate_completer_takeovers_total";
pub const COMPLETER_OUTCOMES: &str = "idemgate_completer_outcomes_total";

/// Every outcome of a completer attempt (`idemgate_completer_outcomes_total`):
/// `completed` (a response stored), `refused` (a release status) and `retry` (no
/// answer from the upstream), both tried again after the backoff, `given_up` (out of attempts, or a
/// resendable request that cannot be read), `lease_lost`, `not_stored`, and the attempts that
/// found the key no longer abandoned: `already_completed`, `in_flight` (a client's
/// retry holds it), `mismatch`, `error` (the claim failed).
pub const COMPLETER_OUTCOME_NAMES: [&str; 10] = [
    "completed",
    "refused",
    "retry",
    "given_up",
    "lease_lost",
    "not_stored",
    "already_completed",
    "in_flight",
    "mismatch",
    "error",
];

/// Describes the completer's metrics.
pub(super) fn describe() {
    use metrics::describe_counter;
    describe_counter!(
        COMPLETER_PASSES,
        "Completer passes, by result: ran (this replica took the pass), skipped (another \
         replica held it), failed (Postgres)."
    );
    describe_counter!(
        COMPLETER_TAKEOVERS,
        "Abandoned requests the completer took over (and sent again)."
    );
    describe_counter!(
        COMPLETER_OUTCOMES,
        "Completer attempts, by outcome (given_up: out of attempts or unreadable)."
    );
}

/// Registers the completer's counters at zero (so that the first increment shows in
/// `increase()`).
pub(super) fn start() {
    for outcome in COMPLETER_OUTCOME_NAMES {
        counter!(COMPLETER_OUTCOMES, "outcome" => outcome).absolute(0);
    }
    counter!(COMPLETER_TAKEOVERS).absolute(0);
}

/// One completer pass: `ran`, `skipped` or `failed`.
pub fn completer_pass(result: &'static str) {
    counter!(COMPLETER_PASSES, "result" => result).increment(1);
}

pub fn completer_takeover() {
    counter!(COMPLETER_TAKEOVERS).increment(1);
}

/// One completer attempt's outcome (one of [`COMPLETER_OUTCOME_NAMES`]).
pub fn completer_outcome(outcome: &'static str) {
    counter!(COMPLETER_OUTCOMES, "outcome" => outcome).increment(1);
}
