//! The admin API's bearer token: read from `admin.token` or `admin.token_file` at
//! start-up, and compared in constant time (`http::admin_keys` asks). Passwords from
//! files are read where their connections are made (`tls::redis`, `tls::postgres`).

use subtle::ConstantTimeEq;

use super::{read_secret, AdminConfig, ConfigError};

/// Reads `admin.token_file` into `admin.token` (start-up only), with the same rule
/// as an inline token: at least 16 characters.
pub fn admin_token(admin: &mut AdminConfig) -> Result<(), ConfigError> {
    let Some(path) = &admin.token_file else {
        return Ok(());
    };
    let token = read_secret("admin.token_file", path)?;
    if token.len() < 16 {
        return Err(ConfigError::invalid(
            "admin.token_file",
            format!("{} must hold at least 16 characters", path.display()),
        ));
    }
    admin.token = Some(token);
    Ok(())
}

/// Whether `given` is the token, in time that depends on neither (both are hashed
/// first, then the digests compared in constant time).
pub fn token_matches(given: &str, token: &str) -> bool {
    use sha2::{Digest, Sha256};
    let (a, b) = (
        Sha256::digest(given.as_bytes()),
        Sha256::digest(token.as_bytes()),
    );
    !given.is_empty() && bool::from(a.as_slice().ct_eq(b.as_slice()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_and_comparison() {
        assert!(token_matches("0123456789abcdef", "0123456789abcdef"));
        assert!(!token_matches("0123456789abcdeF", "0123456789abcdef"));
        assert!(!token_matches("", ""));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "short\n").unwrap();
        let mut admin = AdminConfig {
            token: None,
            token_file: Some(path.clone()),
        };
        let e = admin_token(&mut admin).unwrap_err().to_string();
        assert!(
            e.contains("admin.token_file") && !e.contains("short\n"),
            "{e}"
        );
        std::fs::write(&path, "0123456789abcdef\n").unwrap();
        admin_token(&mut admin).unwrap();
        assert_eq!(admin.token.as_deref(), Some("0123456789abcdef"));
    }
}
