//! The keys that seal stored responses (`[encryption]`): one cipher per key, under the
//! id that sealed records carry, and the one that seals new records (`active`). Built
//! from the key material the configuration read ([`EncryptionKeys`], where a key at
//! fault is reported); its key material is never shown (`Debug` names the ids and files
//! only).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chacha20poly1305::{KeyInit, XChaCha20Poly1305};

use crate::config::{EncryptionKeys, KeyMaterial};
pub use crate::config::{KeyringError, KEY_LEN, MAX_ID_LEN};

/// One key of the ring: the key as the configuration read it, and its cipher.
#[derive(Clone)]
pub struct Key {
    material: KeyMaterial,
    cipher: XChaCha20Poly1305,
}

impl Key {
    pub fn id(&self) -> &str {
        self.material.id()
    }

    pub fn file(&self) -> &Path {
        self.material.file()
    }

    pub(crate) fn cipher(&self) -> &XChaCha20Poly1305 {
        &self.cipher
    }
}

/// The key material's `Debug`: ids and files, never the key.
impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.material.fmt(f)
    }
}

/// The keys and which one seals new records. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Keyring(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    keys: Vec<Key>,
    active: usize,
    replay_unsealed: bool,
}

impl Keyring {
    /// A cipher for each key of `[encryption]`, in the configured order.
    pub fn new(read: &EncryptionKeys) -> Self {
        let keys = (read.keys().iter())
            .map(|k| Key {
                cipher: XChaCha20Poly1305::new(k.bytes().into()),
                material: k.clone(),
            })
            .collect();
        Self(Arc::new(Inner {
            keys,
            active: read.active_index(),
            replay_unsealed: read.replay_unsealed(),
        }))
    }

    /// Reads each `(id, key_file)` and picks `active` ([`EncryptionKeys::from_files`]).
    /// `replay_unsealed`: whether records stored without encryption (before it was
    /// turned on) still replay.
    pub fn from_files(
        keys: &[(String, PathBuf)],
        active: &str,
        replay_unsealed: bool,
    ) -> Result<Self, KeyringError> {
        EncryptionKeys::from_files(keys, active, replay_unsealed).map(|read| Self::new(&read))
    }

    /// Every key, in the configured order.
    pub fn keys(&self) -> &[Key] {
        &self.0.keys
    }

    /// The key that seals new records.
    pub fn active(&self) -> &Key {
        &self.0.keys[self.0.active]
    }

    /// The key with this id, if the ring has it.
    pub fn get(&self, id: &[u8]) -> Option<&Key> {
        self.0.keys.iter().find(|k| k.id().as_bytes() == id)
    }

    /// Whether records stored unsealed still replay.
    pub fn replay_unsealed(&self) -> bool {
        self.0.replay_unsealed
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    const K1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n"; // 32 bytes

    fn ring(ids: &[&str], active: &str) -> (Keyring, Vec<tempfile::NamedTempFile>) {
        let files: Vec<tempfile::NamedTempFile> = (ids.iter())
            .map(|_| {
                let mut f = tempfile::NamedTempFile::new().unwrap();
                f.write_all(K1.as_bytes()).unwrap();
                f
            })
            .collect();
        let keys: Vec<(String, PathBuf)> = (ids.iter().zip(&files))
            .map(|(id, f)| (id.to_string(), f.path().to_path_buf()))
            .collect();
        (Keyring::from_files(&keys, active, true).unwrap(), files)
    }

    #[test]
    fn reads_keys_and_picks_the_active_one() {
        let (ring, _files) = ring(&["k1", "k2"], "k2");
        assert_eq!(ring.active().id(), "k2");
        assert_eq!(ring.keys().len(), 2);
        assert!(ring.get(b"k1").is_some());
        assert!(ring.get(b"k3").is_none());
        assert!(ring.replay_unsealed());
    }

    #[test]
    fn errors_are_the_configurations() {
        let missing = [("k1".to_string(), PathBuf::from("/nonexistent/idemgate-key"))];
        let err = Keyring::from_files(&missing, "k1", true).unwrap_err();
        assert!(
            matches!(err, KeyringError::Unreadable { index: 0, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn debug_never_shows_key_material() {
        let (ring, _files) = ring(&["k1"], "k1");
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
