//! Passwords in connection URLs (`scheme://user:password@host`, `?password=`): whether
//! a URL carries one, and the URL with it hidden, for `check-config`, `Debug` and logs.

/// Replaces the password of `scheme://user:password@host` with `***`.
pub fn redact_url(url: &str) -> String {
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
                Some((name, _)) if name.to_ascii_lowercase().contains("password") => {
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
/// Whether `scheme://user:password@host...` carries a password (in the user info or
/// as a `password` parameter).
pub(super) fn url_password(url: &str) -> bool {
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
    }
}
