//! The key material of `[encryption]`, read while the configuration is read: each
//! key's id, file and bytes, and which key seals new records ([`EncryptionKeys`]). A
//! missing file, a key of the wrong length, a duplicate id or an unknown `active` is a
//! [`KeyringError`] that names the key. The bytes are never shown (`Debug` names the
//! ids and files only); the `idempotency` side builds its ciphers from them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;

/// Longest key id: sealed records store its length in one byte.
pub const MAX_ID_LEN: usize = 64;

/// Bytes of a key, before base64.
pub const KEY_LEN: usize = 32;

/// Why `[encryption]` did not make a keyring. Every message names the key at fault.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyringError {
    #[error("`encryption.keys` is empty: give at least one key")]
    NoKeys,
    #[error(
        "`encryption.keys[{index}].id`: `{id}` is not a key id (1 to {MAX_ID_LEN} \
         characters of A-Z, a-z, 0-9, `.`, `_`, `-`)"
    )]
    BadId { index: usize, id: String },
    #[error("`encryption.keys[{index}].id`: `{id}` is used twice (ids must be unique)")]
    DuplicateId { index: usize, id: String },
    #[error("`encryption.keys[{index}]` (id `{id}`): cannot read key_file {file}: {reason}")]
    Unreadable {
        index: usize,
        id: String,
        file: PathBuf,
        reason: String,
    },
    #[error(
        "`encryption.keys[{index}]` (id `{id}`): key_file {file} is not base64 \
         (write one with `openssl rand -base64 32`)"
    )]
    NotBase64 {
        index: usize,
        id: String,
        file: PathBuf,
    },
    #[error(
        "`encryption.keys[{index}]` (id `{id}`): key_file {file} holds {len} bytes, not \
         {KEY_LEN} (write one with `openssl rand -base64 32`)"
    )]
    WrongLength {
        index: usize,
        id: String,
        file: PathBuf,
        len: usize,
    },
    #[error("`encryption.active`: `{active}` is not the id of any of `encryption.keys` ({known})")]
    UnknownActive { active: String, known: String },
}

/// One key of `encryption.keys`, read from its file.
#[derive(Clone)]
pub struct KeyMaterial {
    id: String,
    file: PathBuf,
    bytes: [u8; KEY_LEN],
}

impl KeyMaterial {
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The key itself.
    pub fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.bytes
    }
}

impl std::fmt::Debug for KeyMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyMaterial")
            .field("id", &self.id)
            .field("key_file", &self.file)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// `[encryption]` as read: the keys and which one seals new records. Cheap to clone.
#[derive(Clone, Debug)]
pub struct EncryptionKeys(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    keys: Vec<KeyMaterial>,
    active: usize,
    replay_unsealed: bool,
}

impl EncryptionKeys {
    /// Reads each `(id, key_file)` and picks `active`. `replay_unsealed`: whether
    /// records stored without encryption (before it was turned on) still replay.
    pub fn from_files(
        keys: &[(String, PathBuf)],
        active: &str,
        replay_unsealed: bool,
    ) -> Result<Self, KeyringError> {
        Self::read_with(keys, active, replay_unsealed, |path| {
            std::fs::read(path).map_err(|e| e.to_string())
        })
    }

    /// As [`from_files`](Self::from_files), reading files through `read`.
    fn read_with(
        keys: &[(String, PathBuf)],
        active: &str,
        replay_unsealed: bool,
        read: impl Fn(&Path) -> Result<Vec<u8>, String>,
    ) -> Result<Self, KeyringError> {
        if keys.is_empty() {
            return Err(KeyringError::NoKeys);
        }
        let mut read_keys: Vec<KeyMaterial> = Vec::with_capacity(keys.len());
        for (index, (id, file)) in keys.iter().enumerate() {
            let (id, file) = (id.clone(), file.clone());
            if !valid_id(&id) {
                return Err(KeyringError::BadId { index, id });
            }
            if read_keys.iter().any(|k| k.id == id) {
                return Err(KeyringError::DuplicateId { index, id });
            }
            read_keys.push(read_key(index, id, file, &read)?);
        }
        let Some(active) = read_keys.iter().position(|k| k.id == active) else {
            let known: Vec<&str> = read_keys.iter().map(|k| k.id.as_str()).collect();
            return Err(KeyringError::UnknownActive {
                active: active.to_string(),
                known: known.join(", "),
            });
        };
        Ok(Self(Arc::new(Inner {
            keys: read_keys,
            active,
            replay_unsealed,
        })))
    }

    /// Every key, in the configured order.
    pub fn keys(&self) -> &[KeyMaterial] {
        &self.0.keys
    }

    /// The key that seals new records.
    pub fn active(&self) -> &KeyMaterial {
        &self.0.keys[self.0.active]
    }

    /// The position of [`active`](Self::active) in [`keys`](Self::keys).
    pub fn active_index(&self) -> usize {
        self.0.active
    }

    /// Whether records stored unsealed still replay.
    pub fn replay_unsealed(&self) -> bool {
        self.0.replay_unsealed
    }
}

/// Reads the key at `index` of `encryption.keys` from `file`: base64 of [`KEY_LEN`] bytes.
fn read_key(
    index: usize,
    id: String,
    file: PathBuf,
    read: impl Fn(&Path) -> Result<Vec<u8>, String>,
) -> Result<KeyMaterial, KeyringError> {
    let contents = match read(&file) {
        Ok(contents) => contents,
        Err(reason) => {
            return Err(KeyringError::Unreadable {
                index,
                id,
                file,
                reason,
            })
        }
    };
    let bytes = match decode_key(&contents) {
        Some(bytes) => bytes,
        None => return Err(KeyringError::NotBase64 { index, id, file }),
    };
    let Ok(bytes) = <[u8; KEY_LEN]>::try_from(bytes.as_slice()) else {
        let len = bytes.len();
        return Err(KeyringError::WrongLength {
            index,
            id,
            file,
            len,
        });
    };
    Ok(KeyMaterial { id, file, bytes })
}

fn valid_id(id: &str) -> bool {
    (1..=MAX_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// Base64 (standard alphabet, padded) with surrounding whitespace allowed, as
/// `openssl rand -base64 32` writes it.
fn decode_key(contents: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(contents).ok()?.trim();
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n"; // 32 bytes
    const SHORT: &str = "c2hvcnQ=\n"; // "short"

    fn ring(keys: &[(&str, &str)], active: &str) -> Result<EncryptionKeys, KeyringError> {
        let keys: Vec<(String, PathBuf)> = (keys.iter())
            .map(|(id, file)| (id.to_string(), PathBuf::from(file)))
            .collect();
        EncryptionKeys::read_with(&keys, active, true, |path| match path.to_str() {
            Some("k1") | Some("k2") => Ok(K1.as_bytes().to_vec()),
            Some("short") => Ok(SHORT.as_bytes().to_vec()),
            Some("text") => Ok(b"not base64 at all!\n".to_vec()),
            _ => Err("No such file or directory (os error 2)".into()),
        })
    }

    #[test]
    fn reads_keys_and_picks_the_active_one() {
        let ring = ring(&[("k1", "k1"), ("k2", "k2")], "k2").unwrap();
        assert_eq!(ring.active().id(), "k2");
        assert_eq!(ring.active_index(), 1);
        let ids: Vec<&str> = ring.keys().iter().map(|k| k.id()).collect();
        assert_eq!(ids, ["k1", "k2"]);
        assert_eq!(ring.keys()[0].bytes(), b"0123456789abcdef0123456789abcdef");
    }

    #[test]
    fn a_missing_file_names_the_key() {
        let err = ring(&[("k1", "k1"), ("k2", "/nowhere")], "k1").unwrap_err();
        assert!(
            matches!(err, KeyringError::Unreadable { index: 1, .. }),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("encryption.keys[1]") && text.contains("`k2`"),
            "{text}"
        );
        assert!(text.contains("/nowhere"), "{text}");
    }

    #[test]
    fn a_key_of_the_wrong_length_names_the_key() {
        let err = ring(&[("k1", "short")], "k1").unwrap_err();
        assert!(
            matches!(
                err,
                KeyringError::WrongLength {
                    index: 0,
                    len: 5,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("not 32"), "{err}");
        let err = ring(&[("k1", "text")], "k1").unwrap_err();
        assert!(
            matches!(err, KeyringError::NotBase64 { index: 0, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn an_unknown_active_key_lists_the_known_ones() {
        let err = ring(&[("k1", "k1"), ("k2", "k2")], "k3").unwrap_err();
        assert_eq!(
            err.to_string(),
            "`encryption.active`: `k3` is not the id of any of `encryption.keys` (k1, k2)"
        );
    }

    #[test]
    fn duplicate_and_bad_ids_are_refused() {
        let err = ring(&[("k1", "k1"), ("k1", "k2")], "k1").unwrap_err();
        assert_eq!(
            err,
            KeyringError::DuplicateId {
                index: 1,
                id: "k1".into()
            }
        );
        let err = ring(&[("k 1", "k1")], "k 1").unwrap_err();
        assert!(
            matches!(err, KeyringError::BadId { index: 0, .. }),
            "{err:?}"
        );
        assert_eq!(ring(&[], "k1").unwrap_err(), KeyringError::NoKeys);
    }

    #[test]
    fn debug_never_shows_key_material() {
        let ring = ring(&[("k1", "k1")], "k1").unwrap();
        let shown = format!("{ring:?}");
        assert!(
            shown.contains("<redacted>") && shown.contains("k1"),
            "{shown}"
        );
        // The key is "0123456789abcdef" twice: neither its text nor its bytes appear.
        assert!(!shown.contains("0123456789abcdef"), "{shown}");
        assert!(!shown.contains("48, 49, 50"), "{shown}");
    }
}
