//! `[encryption]`: the keys that seal stored responses at rest. The section
//! deserialises straight into its key material, [`EncryptionKeys`] (the key files are
//! read then), so a missing file, a key of the wrong length, a duplicate id or an
//! unknown `active` is an error that names the key, reported by `check-config` and at
//! start-up. Written back (the effective configuration) as ids and file paths only,
//! never key material.
//!
//! ```toml
//! [encryption]
//! keys = [{ id = "k1", key_file = "/run/secrets/idemgate-k1" },
//!         { id = "k2", key_file = "/run/secrets/idemgate-k2" }]
//! active = "k2"             # seals new records; the others still open old ones
//! replay_unsealed = true    # records stored before encryption was turned on replay
//! ```

use std::path::PathBuf;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::keys::EncryptionKeys;

/// `[encryption]`: the keys that seal stored responses at rest (XChaCha20-Poly1305);
/// absent, responses are stored in the clear. Every replica needs every key that
/// sealed a record still stored.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EncryptionRepr {
    /// The keys, each `{ id = "k1", key_file = "/run/secrets/idemgate-k1" }`: the active
    /// one seals new records, every key listed still opens the records it sealed. To
    /// rotate: add the new key on every replica, then make it `active`, then remove the
    /// old one once the longest `ttl` has passed.
    keys: Vec<KeyRepr>,
    /// The `id` of the key that seals new records.
    active: String,
    /// Whether records stored in the clear (before encryption was turned on) still
    /// replay; turn off once the longest `ttl` has passed since then.
    #[serde(default = "replay_unsealed_default")]
    replay_unsealed: bool,
}

/// One key of `encryption.keys`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyRepr {
    /// The key's name, stored with each record it seals: unique, 1 to 64 of
    /// `A-Z a-z 0-9 . _ -`.
    id: String,
    /// A file holding 32 random bytes in base64 (`openssl rand -base64 32 > FILE`; a
    /// trailing newline is fine).
    key_file: PathBuf,
}

/// Default `encryption.replay_unsealed` (public for the configuration reference, which
/// cannot read it from `Config::default`: that has no `[encryption]`).
pub const REPLAY_UNSEALED_DEFAULT: bool = true;

fn replay_unsealed_default() -> bool {
    REPLAY_UNSEALED_DEFAULT
}

/// For `#[serde(with = "encryption")]` on `Option<EncryptionKeys>`.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<EncryptionKeys>, D::Error> {
    let Some(repr) = Option::<EncryptionRepr>::deserialize(d)? else {
        return Ok(None);
    };
    let keys: Vec<(String, PathBuf)> = (repr.keys.into_iter())
        .map(|k| (k.id, k.key_file))
        .collect();
    EncryptionKeys::from_files(&keys, &repr.active, repr.replay_unsealed)
        .map(Some)
        .map_err(D::Error::custom)
}

pub fn serialize<S: Serializer>(keys: &Option<EncryptionKeys>, s: S) -> Result<S::Ok, S::Error> {
    let repr = keys.as_ref().map(|ring| EncryptionRepr {
        keys: (ring.keys().iter())
            .map(|k| KeyRepr {
                id: k.id().to_string(),
                key_file: k.file().to_path_buf(),
            })
            .collect(),
        active: ring.active().id().to_string(),
        replay_unsealed: ring.replay_unsealed(),
    });
    repr.serialize(s)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use crate::config::Config;

    fn key_file(contents: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(contents.as_bytes()).unwrap();
        f
    }

    const KEY: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=\n";

    fn toml(keys: &[(&str, &std::path::Path)], active: &str) -> String {
        let keys: Vec<String> = (keys.iter())
            .map(|(id, path)| format!("{{ id = \"{id}\", key_file = \"{}\" }}", path.display()))
            .collect();
        format!(
            "[encryption]\nkeys = [{}]\nactive = \"{active}\"\n",
            keys.join(", ")
        )
    }

    #[test]
    fn the_section_becomes_key_material_and_writes_back_without_it() {
        let (k1, k2) = (key_file(KEY), key_file(KEY));
        let c = Config::from_toml(&toml(&[("k1", k1.path()), ("k2", k2.path())], "k2")).unwrap();
        let ring = c.encryption.as_ref().unwrap();
        assert_eq!(ring.active().id(), "k2");
        assert!(ring.replay_unsealed());
        let shown = c.to_redacted_toml();
        assert!(shown.contains("active = \"k2\""), "{shown}");
        assert!(shown.contains(&k1.path().display().to_string()), "{shown}");
        assert!(!shown.contains("MDEyMzQ1"), "{shown}");
        // What check-config prints loads again.
        let again = Config::from_toml(&shown).unwrap();
        assert_eq!(again.encryption.unwrap().keys().len(), 2);
        assert!(Config::default().encryption.is_none());
    }

    #[test]
    fn errors_name_the_key() {
        let k1 = key_file(KEY);
        let missing = std::path::Path::new("/nonexistent/idemgate-key");
        let err = Config::from_toml(&toml(&[("k1", k1.path()), ("k2", missing)], "k1"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("encryption.keys[1]") && err.contains("`k2`"),
            "{err}"
        );
        assert!(err.contains("/nonexistent/idemgate-key"), "{err}");

        let short = key_file("c2hvcnQ=\n");
        let err = Config::from_toml(&toml(&[("k1", short.path())], "k1"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("encryption.keys[0]") && err.contains("5 bytes"),
            "{err}"
        );

        let err = Config::from_toml(&toml(&[("k1", k1.path())], "k9"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("encryption.active") && err.contains("`k9`"),
            "{err}"
        );

        let err = Config::from_toml(&toml(&[("k1", k1.path()), ("k1", k1.path())], "k1"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("encryption.keys[1].id") && err.contains("twice"),
            "{err}"
        );

        let err = Config::from_toml("[encryption]\nkeys = []\nactive = \"k1\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("encryption.keys") && err.contains("empty"),
            "{err}"
        );
    }
}
