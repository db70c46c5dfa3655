//! JSON Pointers (RFC 6901) as settings write them: `""` (the whole document) or
//! `"/a/b"`, `~0` for `~` and `~1` for `/` inside a segment, and one addition: a segment
//! that is exactly `*` stands for every array element or object member. Parsed once,
//! when the configuration is read; a pointer that does not parse is an error naming its
//! key (`idempotency.fingerprint.ignore_json[1]: must start with "/"`). What a pointer
//! selects in a body is `idempotency::pointer`'s business.

use std::fmt;
use std::str::FromStr;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One reference token of a pointer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    /// A member name, or an array index when it is one (`0`, `17`; no leading zero).
    Key(String),
    /// `*`: any member of an object, any element of an array.
    Any,
}

impl Segment {
    /// The array index this segment names, as RFC 6901 spells one: `0`, or digits
    /// without a leading zero. (`-`, the element after the last, names none.)
    pub fn index(&self) -> Option<usize> {
        let Segment::Key(key) = self else {
            return None;
        };
        let digits = !key.is_empty() && key.bytes().all(|b| b.is_ascii_digit());
        if !digits || (key.len() > 1 && key.starts_with('0')) {
            return None;
        }
        key.parse().ok()
    }
}

/// A parsed JSON Pointer; written back as it was read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JsonPointer {
    text: String,
    segments: Vec<Segment>,
}

impl JsonPointer {
    /// The reference tokens, outermost first; empty for `""`, the whole document.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Whether a segment is `*` (such a pointer can select more than one value).
    pub fn has_wildcard(&self) -> bool {
        self.segments.contains(&Segment::Any)
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// Why a pointer did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PointerError {
    #[error("must start with \"/\" (or be \"\", the whole document)")]
    NoLeadingSlash,
    #[error("`~` must be followed by `0` (for `~`) or `1` (for `/`)")]
    BadEscape,
}

impl FromStr for JsonPointer {
    type Err = PointerError;

    fn from_str(text: &str) -> Result<Self, PointerError> {
        if text.is_empty() {
            return Ok(Self {
                text: String::new(),
                segments: Vec::new(),
            });
        }
        let rest = text.strip_prefix('/').ok_or(PointerError::NoLeadingSlash)?;
        let segments = rest
            .split('/')
            .map(|raw| match raw {
                "*" => Ok(Segment::Any),
                raw => unescape(raw).map(Segment::Key),
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            text: text.to_string(),
            segments,
        })
    }
}

/// `~1` is `/`, `~0` is `~`, in that order of reading (`~01` is `~1`, not `/`).
fn unescape(raw: &str) -> Result<String, PointerError> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '~' => match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return Err(PointerError::BadEscape),
            },
            c => out.push(c),
        }
    }
    Ok(out)
}

impl fmt::Display for JsonPointer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for JsonPointer {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for JsonPointer {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(text: &str) -> Vec<Segment> {
        text.parse::<JsonPointer>().unwrap().segments().to_vec()
    }

    fn key(k: &str) -> Segment {
        Segment::Key(k.into())
    }

    #[test]
    fn parses_segments_with_escapes_and_wildcards() {
        assert_eq!(segs(""), vec![]);
        assert_eq!(segs("/"), vec![key("")]);
        assert_eq!(segs("/a/b"), vec![key("a"), key("b")]);
        assert_eq!(segs("/a~1b/m~0n"), vec![key("a/b"), key("m~n")]);
        assert_eq!(segs("/~01"), vec![key("~1")]);
        assert_eq!(
            segs("/items/*/ts"),
            vec![key("items"), Segment::Any, key("ts")]
        );
        assert_eq!(segs("/**"), vec![key("**")]);
        assert_eq!(segs("//x/"), vec![key(""), key("x"), key("")]);
        let p: JsonPointer = "/a~1b/*".parse().unwrap();
        assert_eq!(p.to_string(), "/a~1b/*");
        assert!(p.has_wildcard());
    }

    #[test]
    fn refuses_a_missing_slash_and_bad_escapes() {
        assert_eq!(
            "a/b".parse::<JsonPointer>(),
            Err(PointerError::NoLeadingSlash)
        );
        assert_eq!(
            "#/a".parse::<JsonPointer>(),
            Err(PointerError::NoLeadingSlash)
        );
        for bad in ["/~", "/a~2", "/~x", "/a/~"] {
            assert_eq!(
                bad.parse::<JsonPointer>(),
                Err(PointerError::BadEscape),
                "{bad}"
            );
        }
    }

    #[test]
    fn array_indexes_are_rfc_6901_ones() {
        assert_eq!(key("0").index(), Some(0));
        assert_eq!(key("17").index(), Some(17));
        for no in ["01", "-", "", "1a", "+1", "99999999999999999999999"] {
            assert_eq!(key(no).index(), None, "{no}");
        }
        assert_eq!(Segment::Any.index(), None);
    }
}
