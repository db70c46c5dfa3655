//! Passwords in connection URLs (`scheme://user:password@host`, `?password=`) and in
//! libpq key=value strings (`password=...`): whether a connection string carries one,
//! and the string with it hidden, for `check-config`, `Debug` and logs.

use super::conninfo;

/// Replaces the password of `scheme://user:password@host` (and of every parameter whose
/// name says password) with `***`; in a key=value string, the value of every such key.
/// A string that is neither form shows as a placeholder: it may hold anything.
pub fn redact_url(url: &str) -> String {
    if !conninfo::is_url(url) {
        return match conninfo::parse(url) {
            Some(pairs) => {
                conninfo::render(pairs.iter().map(|(name, value)| match is_secret(name) {
                    true => (&**name, "***"),
                    false => (&**name, &**value),
                }))
            }
            None => "(not a connection string: hidden)".into(),
        };
    }
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let mut out = match base.split_once("://").and_then(|(scheme, rest)| {
        let (userinfo, host) = rest.rsplit_once('@')?;
        let (user, _password) = userinfo.split_once(':')?;
        Some(format!("{scheme}://{user}:***@{host}"))
    }) {
        Some(redacted) => redacted,
        None => base.to_string(),
    };
    if let Some(query) = query {
        // Secrets may also travel as parameters (`?password=`, libpq's `sslpassword`).
        let params: Vec<String> = (query.split('&'))
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if is_secret(name) => {
                    format!("{name}=***")
                }
                _ => pair.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}
/// Whether a parameter named `name` holds a secret (`password`, `sslpassword`).
fn is_secret(name: &str) -> bool {
    name.to_ascii_lowercase().contains("password")
}

/// Whether `scheme://user:password@host...` carries a password (in the user info or
/// as a `password` parameter), or a key=value string a `password=`.
pub(super) fn url_password(url: &str) -> bool {
    if !conninfo::is_url(url) {
        return conninfo::parse(url).is_some_and(|p| p.iter().any(|(n, _)| n == "password"));
    }
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let in_userinfo = (base.split_once("://"))
        .and_then(|(_, rest)| rest.rsplit_once('@'))
        .is_some_and(|(userinfo, _)| userinfo.contains(':'));
    in_userinfo || query.split('&').any(|p| p.starts_with("password="))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords_only() {
        assert_eq!(
            redact_url("redis://u:secret@host:6379/0"),
            "redis://u:***@host:6379/0"
        );
        assert_eq!(redact_url("redis://:secret@h"), "redis://:***@h");
        assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
        assert_eq!(
            redact_url("postgres://u@h/db?sslmode=disable&password=s3cret&sslpassword=x"),
            "postgres://u@h/db?sslmode=disable&password=***&sslpassword=***"
        );
        let pairs = "host=a,b port=1,2 user=u password='s3 cret' sslpassword=x dbname=d";
        assert_eq!(
            redact_url(pairs),
            "host=a,b port=1,2 user=u password=*** sslpassword=*** dbname=d"
        );
        assert!(url_password(pairs));
        assert!(!url_password("host=a user=u"));
        assert!(!redact_url("password='unterminated secret").contains("secret"));
    }
}
