//! Encryption at rest: a stored response sealed with XChaCha20-Poly1305 under the
//! keyring's active key, bound to its scope and record id, before it reaches Redis or
//! Postgres, and opened again when read back. Both tiers hold the same sealed bytes.
//!
//! Sealed encoding (version 2 of [`super::replay`]'s): `0x02`, key id length (u8), key
//! id, nonce (24 random bytes), then the version 1 encoding of the response (status,
//! headers, body) encrypted, then the 16-byte tag. Associated data: a label, the
//! version and key id bytes, the scope and the record id; so a record edited, copied
//! onto another key or into another scope, or relabelled with another key id, fails to
//! open. XChaCha20's 192-bit random nonces cannot repeat in any realistic number of
//! records under one key (96-bit random nonces, as in AES-GCM, are good for about 2^32).

use bytes::{BufMut, Bytes, BytesMut};
use chacha20poly1305::aead::{AeadCore, AeadInPlace, OsRng};
use chacha20poly1305::{Tag, XChaCha20Poly1305, XNonce};

use super::keyring::{Keyring, MAX_ID_LEN};
use super::stored::StoredResponse;
use super::{RecordId, Scope};

/// First byte of a sealed record.
pub const SEALED_VERSION: u8 = 2;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
const LABEL: &[u8] = b"idemgate sealed record v2";
/// The label of a resendable request ([`super::resendable`]): sealed in the same envelope, but
/// never opened as a response, nor a response as a request.
const REQUEST_LABEL: &[u8] = b"idemgate kept request v1";
/// The label of a live stream's entry (`store::redis::live`).
const LIVE_LABEL: &[u8] = b"idemgate live entry v1";
/// Largest associated data: label, version, id length, id, scope, record id.
const MAX_AAD: usize = LABEL.len() + 2 + MAX_ID_LEN + 64;

/// A completed record as a store read it back: a response stored unsealed, or sealed
/// bytes that only [`Sealing::open`] turns into one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredRecord {
    Plain(StoredResponse),
    Sealed(Bytes),
}

impl StoredRecord {
    /// Reads either encoding, by its version byte. A sealed record is checked for
    /// shape only here; it is authenticated when opened.
    pub fn decode(raw: Bytes) -> Result<Self, &'static str> {
        match raw.first() {
            Some(&SEALED_VERSION) => Self::sealed(raw),
            _ => StoredResponse::decode(raw).map(Self::Plain),
        }
    }

    /// The record as a store holds it (what Redis' `r` field holds).
    pub fn to_bytes(&self) -> Bytes {
        match self {
            Self::Plain(response) => response.encode(),
            Self::Sealed(raw) => raw.clone(),
        }
    }

    /// A record that must be sealed (Postgres' `status = 0` rows).
    pub fn sealed(raw: Bytes) -> Result<Self, &'static str> {
        Envelope::parse(&raw)?;
        Ok(Self::Sealed(raw))
    }
}

/// Where a record lives: what its seal is bound to.
#[derive(Debug, Clone, Copy)]
pub struct Binding {
    pub scope: Scope,
    pub record: RecordId,
}

/// Why a stored record cannot be replayed. It is never replayed, and never re-run:
/// the key answers 500 `stored_record_unreadable` until it expires or is invalidated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreadable {
    /// Authentication failed: edited, moved to another key or scope, or sealed with
    /// other key material under the same id.
    #[error("a sealed record failed authentication (edited, moved, or sealed with other key material under key id `{0}`)")]
    Forged(String),
    #[error("a record is sealed under key id `{0}`, which is not in encryption.keys")]
    UnknownKey(String),
    #[error("a record is sealed, but no [encryption] keys are configured")]
    NoKeys,
    #[error("a record is stored unsealed and encryption.replay_unsealed is false")]
    Unsealed,
    #[error("a sealed record opened but does not decode: {0}")]
    Malformed(&'static str),
}

impl Unreadable {
    /// The metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Unreadable::Forged(_) => "forged",
            Unreadable::UnknownKey(_) => "unknown_key",
            Unreadable::NoKeys => "no_keys",
            Unreadable::Unsealed => "unsealed",
            Unreadable::Malformed(_) => "malformed",
        }
    }
}

/// Seals and opens stored responses: with a keyring when `[encryption]` is configured,
/// else a pass-through that stores responses unsealed. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Sealing(Option<Keyring>);

impl Sealing {
    pub fn new(keyring: Option<Keyring>) -> Self {
        Self(keyring)
    }

    /// The sealed form of a response at `at`, under the active key, from its one
    /// encoding (`encoded`, as [`StoredResponse::encode`] makes it: sealing does not
    /// encode again); `None` when encryption is off (the caller stores it unsealed).
    pub fn seal(&self, encoded: &[u8], at: Binding) -> Option<Bytes> {
        self.seal_labelled(LABEL, encoded, at)
    }

    /// A resendable request ([`super::resendable`]) as stored: sealed under the active key with its
    /// own label, or as it is when encryption is off.
    pub fn seal_request(&self, encoded: &Bytes, at: Binding) -> Bytes {
        (self.seal_labelled(REQUEST_LABEL, encoded, at)).unwrap_or_else(|| encoded.clone())
    }

    /// The resendable request's encoding from what a store holds at `at`.
    pub fn open_request(&self, raw: Bytes, at: Binding) -> Result<Bytes, Unreadable> {
        self.open_raw(REQUEST_LABEL, raw, at)
    }

    /// An entry of a live stream as Redis holds it: sealed under the active key with
    /// its own label, or as it is when encryption is off.
    pub fn seal_live(&self, entry: &Bytes, at: Binding) -> Bytes {
        (self.seal_labelled(LIVE_LABEL, entry, at)).unwrap_or_else(|| entry.clone())
    }

    /// A live stream's entry from what Redis holds at `at`.
    pub fn open_live(&self, raw: Bytes, at: Binding) -> Result<Bytes, Unreadable> {
        self.open_raw(LIVE_LABEL, raw, at)
    }

    fn open_raw(&self, label: &[u8], raw: Bytes, at: Binding) -> Result<Bytes, Unreadable> {
        if raw.first() != Some(&SEALED_VERSION) {
            return match &self.0 {
                Some(keyring) if !keyring.replay_unsealed() => Err(Unreadable::Unsealed),
                _ => Ok(raw),
            };
        }
        self.open_labelled(label, &raw, at)
    }

    fn seal_labelled(&self, label: &[u8], encoded: &[u8], at: Binding) -> Option<Bytes> {
        let keyring = self.0.as_ref()?;
        let key = keyring.active();
        let id = key.id().as_bytes();
        let mut out = BytesMut::with_capacity(2 + id.len() + NONCE_LEN + encoded.len() + TAG_LEN);
        out.put_u8(SEALED_VERSION);
        out.put_u8(id.len() as u8);
        out.put_slice(id);
        let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
        out.put_slice(&nonce);
        let start = out.len();
        out.put_slice(encoded);
        let mut aad = [0u8; MAX_AAD];
        let aad = associated_data(&mut aad, label, id, at);
        // Fails only for messages beyond 256 GiB, far past any response limit.
        let tag = key
            .cipher()
            .encrypt_in_place_detached(&nonce, aad, &mut out[start..])
            .expect("a stored response is far below XChaCha20-Poly1305's message limit");
        out.put_slice(&tag);
        Some(out.freeze())
    }

    /// The response a stored record holds, if it opens at `at`.
    pub fn open(&self, record: StoredRecord, at: Binding) -> Result<StoredResponse, Unreadable> {
        let raw = match record {
            StoredRecord::Plain(response) => {
                return match &self.0 {
                    Some(keyring) if !keyring.replay_unsealed() => Err(Unreadable::Unsealed),
                    _ => Ok(response),
                }
            }
            StoredRecord::Sealed(raw) => raw,
        };
        let plain = self.open_labelled(LABEL, &raw, at)?;
        StoredResponse::decode(plain).map_err(Unreadable::Malformed)
    }

    fn open_labelled(&self, label: &[u8], raw: &[u8], at: Binding) -> Result<Bytes, Unreadable> {
        let envelope = Envelope::parse(raw).map_err(Unreadable::Malformed)?;
        let id = String::from_utf8_lossy(envelope.id).into_owned();
        let keyring = self.0.as_ref().ok_or(Unreadable::NoKeys)?;
        let key = keyring
            .get(envelope.id)
            .ok_or_else(|| Unreadable::UnknownKey(id.clone()))?;
        let mut plain = BytesMut::from(envelope.ciphertext);
        let mut aad = [0u8; MAX_AAD];
        let aad = associated_data(&mut aad, label, envelope.id, at);
        (key.cipher())
            .decrypt_in_place_detached(envelope.nonce, aad, &mut plain, envelope.tag)
            .map_err(|_| Unreadable::Forged(id))?;
        Ok(plain.freeze())
    }
}

/// The parts of a sealed record.
struct Envelope<'a> {
    id: &'a [u8],
    nonce: &'a XNonce,
    ciphertext: &'a [u8],
    tag: &'a Tag,
}

impl<'a> Envelope<'a> {
    fn parse(raw: &'a [u8]) -> Result<Self, &'static str> {
        let [SEALED_VERSION, id_len, rest @ ..] = raw else {
            return Err("not a sealed record");
        };
        let id_len = usize::from(*id_len);
        if id_len == 0 || id_len > MAX_ID_LEN || rest.len() < id_len + NONCE_LEN + TAG_LEN {
            return Err("sealed record truncated");
        }
        let (id, rest) = rest.split_at(id_len);
        let (nonce, rest) = rest.split_at(NONCE_LEN);
        let (ciphertext, tag) = rest.split_at(rest.len() - TAG_LEN);
        Ok(Self {
            id,
            nonce: XNonce::from_slice(nonce),
            ciphertext,
            tag: Tag::from_slice(tag),
        })
    }
}

/// Label, version, key id (with its length), scope and record id, written into `buf`.
fn associated_data<'b>(
    buf: &'b mut [u8; MAX_AAD],
    label: &[u8],
    id: &[u8],
    at: Binding,
) -> &'b [u8] {
    let mut n = 0;
    for part in [
        label,
        &[SEALED_VERSION, id.len() as u8],
        id,
        &at.scope.as_bytes()[..],
        &at.record.as_bytes()[..],
    ] {
        buf[n..n + part.len()].copy_from_slice(part);
        n += part.len();
    }
    &buf[..n]
}

#[cfg(test)]
mod tests;
