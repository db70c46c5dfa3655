//! What a replay repeats: byte-identical answers, the fingerprint and what it ignores,
//! mismatches, the replay policy, the in-process replay cache, one encoding per first
//! execution, and `Idempotency-Expires`.

mod basics;
mod cache;
mod encoded_once;
mod expires;
mod fingerprint;
mod fingerprint_change;
mod policy;
