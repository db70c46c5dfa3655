//! The request path as routing sees it: checked, and put in one canonical form before
//! any route is chosen, so that the route (and its policy) a path gets is the one an
//! upstream that normalises paths would serve.
//!
//! Refused with 400 `invalid_path` (nothing is forwarded): a path that does not start
//! with `/`; a `.` or `..` segment, literal or percent-encoded in any case (`%2e`,
//! `%2E`), also before a `;` parameter (`..;x`, which Tomcat-style servers resolve);
//! an empty segment (`//`) anywhere but at the end; a literal `\` or an encoded `/` or
//! `\` (`%2F`, `%5C`); a `%` not followed by two hex digits. Percent-encoded unreserved
//! characters (`%31` for `1`, `%7E` for `~`) are decoded, as RFC 3986 section 6.2.2.2
//! allows, and the decoded path is what is routed, fingerprinted and forwarded. Paths
//! without such escapes (nearly all) are checked without being copied.

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::Uri;

/// Why a request path is refused. The texts never repeat the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the path does not start with `/`")]
    NotAbsolute,
    #[error("the path has an empty segment (`//`)")]
    EmptySegment,
    #[error("the path has a `.` or `..` segment (literal or percent-encoded)")]
    DotSegment,
    #[error("the path has a `\\`, or an encoded `/` or `\\` (`%2F`, `%5C`)")]
    Separator,
    #[error("the path has a `%` that is not followed by two hex digits")]
    BadEscape,
}

/// Checks `uri`'s path and rewrites it in place into its canonical form.
pub fn canonicalize(uri: &mut Uri) -> Result<(), PathError> {
    let path = uri.path();
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if scan(path.as_bytes())? {
        let decoded = decode(path.as_bytes());
        check_segments(&decoded)?;
        let mut target = decoded;
        if let Some(query) = uri.query() {
            target.push(b'?');
            target.extend_from_slice(query.as_bytes());
        }
        let mut parts = std::mem::take(uri).into_parts();
        parts.path_and_query = Some(
            PathAndQuery::from_maybe_shared(Bytes::from(target))
                .map_err(|_| PathError::BadEscape)?,
        );
        *uri = Uri::from_parts(parts).map_err(|_| PathError::BadEscape)?;
        Ok(())
    } else {
        check_segments(path.as_bytes())
    }
}

/// Refuses backslashes, encoded separators and bad escapes; says whether some escape
/// encodes an unreserved character (and so must be decoded).
fn scan(path: &[u8]) -> Result<bool, PathError> {
    let mut decode = false;
    let mut i = 0;
    while let Some(&byte) = path.get(i) {
        match byte {
            b'\\' => return Err(PathError::Separator),
            b'%' => {
                let byte = escaped(path, i).ok_or(PathError::BadEscape)?;
                if byte == b'/' || byte == b'\\' {
                    return Err(PathError::Separator);
                }
                decode |= unreserved(byte);
                i += 3;
            }
            _ => i += 1,
        }
    }
    Ok(decode)
}

/// The byte `%XY` at `at` stands for, if `XY` are two hex digits.
fn escaped(path: &[u8], at: usize) -> Option<u8> {
    let hex = |b: u8| (b as char).to_digit(16);
    let hi = hex(*path.get(at + 1)?)?;
    let lo = hex(*path.get(at + 2)?)?;
    Some((hi * 16 + lo) as u8)
}

/// RFC 3986 section 2.3.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// `path` with escapes of unreserved characters decoded; other escapes kept as sent.
fn decode(path: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len());
    let mut i = 0;
    while let Some(&byte) = path.get(i) {
        match escaped(path, i).filter(|b| byte == b'%' && unreserved(*b)) {
            Some(decoded) => {
                out.push(decoded);
                i += 3;
            }
            None => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

/// Refuses dot segments and empty segments (a trailing `/` is fine). A segment's name
/// is what comes before its first `;`.
fn check_segments(path: &[u8]) -> Result<(), PathError> {
    let below_root = path.strip_prefix(b"/").ok_or(PathError::NotAbsolute)?;
    let mut segments = below_root.split(|b| *b == b'/').peekable();
    while let Some(segment) = segments.next() {
        let name = segment.split(|b| *b == b';').next().unwrap_or_default();
        match name {
            b"." | b".." => return Err(PathError::DotSegment),
            b"" if segments.peek().is_some() => return Err(PathError::EmptySegment),
            _ => {}
        }
    }
    Ok(())
}

/// Whether route prefix `prefix` covers `path` (both canonical) by whole segments: a
/// prefix ending in `/` covers everything below it; any other covers itself and what
/// follows a `/` or `;` after it (`/v1/pay` covers `/v1/pay/x`, not `/v1/payments`).
pub fn covers(prefix: &str, path: &str) -> bool {
    path.starts_with(prefix)
        && (prefix.ends_with('/')
            || matches!(path.as_bytes().get(prefix.len()), None | Some(b'/' | b';')))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(target: &str) -> Result<String, PathError> {
        let mut uri: Uri = target.parse().unwrap();
        canonicalize(&mut uri).map(|()| uri.to_string())
    }

    #[test]
    fn ordinary_paths_pass_unchanged() {
        for ok in [
            "/",
            "/v1/",
            "/v1/payments?x=1&y=%2F..",
            "/v1/a.b/..c/c../.../x%20y/%E2%82%AC",
            "/v1/payments/",
            "/v1/pay;jsessionid=1",
            "/v1/%3B%3f",
        ] {
            assert_eq!(check(ok).as_deref(), Ok(ok), "{ok}");
        }
    }

    #[test]
    fn refused_paths_name_their_reason() {
        use PathError::*;
        let cases = [
            ("*", NotAbsolute),
            ("//v1/x", EmptySegment),
            ("/v1//x", EmptySegment),
            ("/v1/;x/y", EmptySegment),
            ("/v1/../internal", DotSegment),
            ("/v1/./x", DotSegment),
            ("/v1/..", DotSegment),
            ("/v1/.", DotSegment),
            ("/v1/%2e%2e/internal", DotSegment),
            ("/v1/%2E%2e/internal", DotSegment),
            ("/v1/.%2E/internal", DotSegment),
            ("/v1/%2e/x", DotSegment),
            ("/v1/..;x/internal", DotSegment),
            ("/v1/%2e%2e;/internal", DotSegment),
            ("/v1/a%2fb", Separator),
            ("/v1/a%2Fb", Separator),
            ("/v1/a%5cb", Separator),
            ("/v1/a%5Cb", Separator),
            ("/v1\\..\\internal", Separator),
            ("/v1/%", BadEscape),
            ("/v1/%2", BadEscape),
            ("/v1/%zz", BadEscape),
        ];
        for (target, why) in cases {
            assert_eq!(check(target), Err(why), "{target}");
        }
    }

    #[test]
    fn escaped_unreserved_characters_are_decoded_query_kept() {
        assert_eq!(
            check("/v%31/pay%6Dents/%7euser%20x?q=%31").as_deref(),
            Ok("/v1/payments/~user%20x?q=%31")
        );
        let mut absolute: Uri = "http://h:1/%76%31/x".parse().unwrap();
        canonicalize(&mut absolute).unwrap();
        assert_eq!(absolute.to_string(), "http://h:1/v1/x");
    }

    #[test]
    fn prefixes_cover_whole_segments() {
        assert!(covers("/", "/anything"));
        assert!(covers("/v1/", "/v1/x") && !covers("/v1/", "/v1x/y") && !covers("/v1/", "/v1"));
        assert!(covers("/v1/pay", "/v1/pay") && covers("/v1/pay", "/v1/pay/x"));
        assert!(covers("/v1/pay", "/v1/pay;p=1") && !covers("/v1/pay", "/v1/payments"));
    }
}
