//! Idempotency semantics, independent of any store or transport: what a key is
//! ([`key`]), whose it is ([`scope`]), what identifies a request ([`fingerprint`], with
//! [`canonical`] JSON), the outcomes of a claim ([`outcomes`]), what is stored for a
//! completed key ([`stored`]), its wire encoding ([`encoding`]) and the response sent
//! from it ([`replay`]), until when it lives ([`expiry`]), the request kept for the
//! completer ([`resendable`]), and how both are sealed at rest ([`keyring`], [`sealed`]).

pub mod canonical;
pub mod encoding;
pub mod expiry;
pub mod fingerprint;
pub mod key;
pub mod keyring;
pub mod outcomes;
pub mod pointer;
pub mod replay;
pub mod resendable;
pub mod scope;
pub mod sealed;
pub mod stored;

pub use encoding::Encoded;
pub use expiry::Expiry;
pub use fingerprint::{Fingerprint, RecordId};
pub use key::{IdempotencyKey, KeyError};
pub use keyring::{Keyring, KeyringError};
pub use outcomes::{Claim, Completion, Home, Release};
pub use resendable::ResendableRequest;
pub use scope::{Scope, ScopeError, ScopeKeys, ScopeSecret};
pub use sealed::{Binding, Sealing, StoredRecord, Unreadable};
pub use stored::{header_map, StoredResponse};
