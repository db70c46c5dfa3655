//! Idempotency semantics, independent of any store or transport: what a key is
//! ([`key`]), whose it is ([`scope`]), what identifies a request ([`fingerprint`],
//! with [`canonical`] JSON),
//! the outcomes of a claim ([`claim`]), and what is stored and
//! replayed ([`replay`]).

pub mod canonical;
pub mod claim;
pub mod fingerprint;
pub mod key;
pub mod replay;
pub mod scope;

pub use claim::{Claim, Completion, Home, Release};
pub use fingerprint::{Fingerprint, RecordId};
pub use key::{IdempotencyKey, KeyError};
pub use replay::{Encoded, StoredResponse};
pub use scope::{Scope, ScopeError, ScopeKeys, ScopeSecret};
