//! libpq's key=value connection strings (`host=a,b port=5432,5433 dbname=x
//! target_session_attrs=read-write`), the form many managed services print, beside the
//! `postgres://` URL form: telling the two apart, reading the pairs (libpq's quoting:
//! `'...'` with `\'` and `\\`) and writing them back.

/// Whether `s` is a connection URL (`scheme://...`) rather than key=value pairs.
pub fn is_url(s: &str) -> bool {
    s.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && (scheme.chars()).all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

/// The `keyword=value` pairs of a libpq connection string, in order; `None` when it is
/// not one (a word without `=`, an unterminated quote).
pub fn parse(s: &str) -> Option<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Some(pairs);
        }
        let mut name = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            name.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if name.is_empty() || chars.next() != Some('=') {
            return None;
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next()? {
                    '\'' => break,
                    '\\' => value.push(chars.next()?),
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                match c {
                    '\\' => value.push(chars.next()?),
                    c => value.push(c),
                }
            }
        }
        pairs.push((name, value));
    }
}

/// `pairs` as a connection string libpq (and tokio-postgres) reads back.
pub fn render<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let quoted = |v: &str| {
        if !v.is_empty() && !v.contains(|c: char| c.is_whitespace() || c == '\'' || c == '\\') {
            return v.to_string();
        }
        format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
    };
    (pairs.into_iter())
        .map(|(name, value)| format!("{name}={}", quoted(value)))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_read_back_as_written() {
        let s = "host=a,b port = 1,2 password='it''s' user=u\\ x dbname=''";
        assert_eq!(parse(s), None, "'' inside quotes is not libpq's escape");
        let s = r"host=a,b port = 1,2 password='it\'s a \\secret' user=u\ x dbname=''";
        let pairs = parse(s).unwrap();
        let expect = [
            ("host", "a,b"),
            ("port", "1,2"),
            ("password", "it's a \\secret"),
            ("user", "u x"),
            ("dbname", ""),
        ];
        let got: Vec<(&str, &str)> = pairs.iter().map(|(n, v)| (&**n, &**v)).collect();
        assert_eq!(got, expect);
        assert_eq!(parse(&render(got.iter().copied())).unwrap(), pairs);
        for garbage in ["not a connection string", "host", "password='open"] {
            assert_eq!(parse(garbage), None, "{garbage}");
        }
        assert!(!is_url(s));
        assert!(is_url("postgres://h/db"));
        assert!(!is_url("host=h options='-c x=a://b'"));
    }
}
