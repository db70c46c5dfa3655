//! Idempotency semantics, independent of any store or transport: what a key is
//! ([`key`]), whose it is ([`scope`]), what identifies a request ([`fingerprint`],
//! with [`canonical`] JSON),
//! the outcomes of a claim ([`claim`]), what is stored and
//! replayed ([`replay`]) and until when ([`expiry`]), the request kept for the completer ([`kept`]), and how it is sealed at rest ([`keyring`], [`sealed`]).

pub mod canonical;
pub mod claim;
pub mod expiry;
pub mod fingerprint;
pub mod kept;
pub mod key;
pub mod keyring;
pub mod pointer;
pub mod replay;
pub mod scope;
pub mod sealed;

pub use claim::{Claim, Completion, Home, Release};
pub use expiry::Expiry;
pub use fingerprint::{Fingerprint, RecordId};
pub use kept::KeptRequest;
pub use key::{IdempotencyKey, KeyError};
pub use keyring::{Keyring, KeyringError};
pub use replay::{header_map, Encoded, StoredResponse};
pub use scope::{Scope, ScopeError, ScopeKeys, ScopeSecret};
pub use sealed::{Binding, Sealing, StoredRecord, Unreadable};
