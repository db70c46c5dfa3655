//! What a JSON Pointer ([`JsonPointer`], parsed with the configuration) selects in a
//! body: whether the path of a value matches it ([`matches`], [`descend`], which the
//! canonicaliser uses to leave out `fingerprint.ignore_json`), and the one string it
//! names ([`string_at`]).
//!
//! A segment matches an object member of that name, or an array element when the
//! segment is an RFC 6901 index (`0`, `12`; `01` and `-` match no element); `*` matches
//! every member and every element.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

pub use crate::config::{JsonPointer, Segment};

/// One step of the path from the root of a document to a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    /// An object member, by its (decoded) name.
    Member(&'a str),
    /// An array element, by its index in the document as written.
    Index(usize),
}

/// Whether `segment` selects the value reached by `step`.
pub fn segment_matches(segment: &Segment, step: Step<'_>) -> bool {
    match (segment, step) {
        (Segment::Any, _) => true,
        (Segment::Key(key), Step::Member(name)) => key == name,
        (segment, Step::Index(i)) => segment.index() == Some(i),
    }
}

/// Whether `pointer` selects the value at `path` (the whole path, not a prefix of it).
pub fn matches(pointer: &JsonPointer, path: &[Step<'_>]) -> bool {
    let segments = pointer.segments();
    segments.len() == path.len()
        && (segments.iter().zip(path)).all(|(s, step)| segment_matches(s, *step))
}

/// One step down from a value at depth `depth` whose path every pointer of `live`
/// matches so far: whether a pointer selects the child at `step` (it ends there), and
/// the pointers that may still select something below it. With no live pointers this
/// costs nothing (no allocation).
pub fn descend<'p>(
    live: &[&'p JsonPointer],
    depth: usize,
    step: Step<'_>,
) -> (bool, Vec<&'p JsonPointer>) {
    let mut selected = false;
    let mut below = Vec::new();
    for pointer in live {
        let segments = pointer.segments();
        let Some(segment) = segments.get(depth) else {
            continue;
        };
        if !segment_matches(segment, step) {
            continue;
        }
        if segments.len() == depth + 1 {
            selected = true;
        } else {
            below.push(*pointer);
        }
    }
    (selected, below)
}

/// Why [`string_at`] found no one string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StringAtError {
    #[error("the body is not JSON")]
    NotJson,
    #[error("the value at the pointer is not a string")]
    NotAString,
    #[error("an object on the way to the pointer has the member twice")]
    Ambiguous,
    #[error("a pointer with `*` can name more than one value")]
    Wildcard,
}

/// The string `body` (JSON) holds at `pointer` (one without `*`): `Ok(None)` when
/// nothing is there, or `null`. A member that appears twice in an object on the pointer's path is
/// [`StringAtError::Ambiguous`] (parsers disagree on which one counts); repeated members
/// elsewhere in the body do not matter. Values off the path are skipped unconverted; a
/// number on the path itself that no `f64` holds (`1e400`) is [`StringAtError::NotJson`]
/// rather than [`StringAtError::NotAString`] or missing.
pub fn string_at(body: &[u8], pointer: &JsonPointer) -> Result<Option<String>, StringAtError> {
    if pointer.has_wildcard() {
        return Err(StringAtError::Wildcard);
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    let found = Seek(pointer.segments())
        .deserialize(&mut de)
        .map_err(|_| StringAtError::NotJson)?;
    de.end().map_err(|_| StringAtError::NotJson)?;
    match found {
        Found::Missing => Ok(None),
        Found::Str(s) => Ok(Some(s)),
        Found::Other => Err(StringAtError::NotAString),
        Found::Ambiguous => Err(StringAtError::Ambiguous),
    }
}

/// What [`Seek`] found at the end of its segments.
enum Found {
    Missing,
    Str(String),
    Other,
    Ambiguous,
}

/// Reads one value, following the remaining segments into it; everything off the path is
/// skipped unread ([`IgnoredAny`]).
struct Seek<'p>(&'p [Segment]);

impl<'de> DeserializeSeed<'de> for Seek<'_> {
    type Value = Found;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Found, D::Error> {
        d.deserialize_any(self)
    }
}

impl Seek<'_> {
    fn scalar<E>(self) -> Result<Found, E> {
        Ok(match self.0.is_empty() {
            true => Found::Other,
            false => Found::Missing,
        })
    }
}

impl<'de> Visitor<'de> for Seek<'_> {
    type Value = Found;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E>(self, s: &str) -> Result<Found, E> {
        Ok(match self.0.is_empty() {
            true => Found::Str(s.to_string()),
            false => Found::Missing,
        })
    }

    fn visit_bool<E>(self, _: bool) -> Result<Found, E> {
        self.scalar()
    }
    fn visit_i64<E>(self, _: i64) -> Result<Found, E> {
        self.scalar()
    }
    fn visit_u64<E>(self, _: u64) -> Result<Found, E> {
        self.scalar()
    }
    fn visit_f64<E>(self, _: f64) -> Result<Found, E> {
        self.scalar()
    }
    // `null` is nothing there (`{"key": null}` is how many serialisers write a member
    // they have no value for), and so is anything below it.
    fn visit_unit<E>(self) -> Result<Found, E> {
        Ok(Found::Missing)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Found, A::Error> {
        let Some((first, rest)) = self.0.split_first() else {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            return Ok(Found::Other);
        };
        let wanted = first.index();
        let mut found = Found::Missing;
        let mut i = 0;
        loop {
            if Some(i) == wanted {
                match seq.next_element_seed(Seek(rest))? {
                    Some(value) => found = value,
                    None => break,
                }
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                break;
            }
            i += 1;
        }
        Ok(found)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Found, A::Error> {
        let Some((Segment::Key(name), rest)) = self.0.split_first() else {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(Found::Other);
        };
        let mut found = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key != name.as_str() {
                map.next_value::<IgnoredAny>()?;
            } else if found.is_some() {
                map.next_value::<IgnoredAny>()?;
                found = Some(Found::Ambiguous);
            } else {
                found = Some(map.next_value_seed(Seek(rest))?);
            }
        }
        Ok(found.unwrap_or(Found::Missing))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> JsonPointer {
        text.parse().unwrap()
    }

    #[test]
    fn a_pointer_matches_whole_paths_with_wildcards() {
        use Step::{Index, Member};
        assert!(matches(&p(""), &[]));
        assert!(matches(&p("/a/b"), &[Member("a"), Member("b")]));
        assert!(!matches(&p("/a/b"), &[Member("a")]));
        assert!(!matches(&p("/a"), &[Member("a"), Member("b")]));
        assert!(matches(
            &p("/items/*/ts"),
            &[Member("items"), Index(3), Member("ts")]
        ));
        assert!(matches(
            &p("/items/*/ts"),
            &[Member("items"), Member("x"), Member("ts")]
        ));
        assert!(matches(&p("/a/0"), &[Member("a"), Index(0)]));
        assert!(matches(&p("/a/0"), &[Member("a"), Member("0")]));
        assert!(!matches(&p("/a/01"), &[Member("a"), Index(1)]));
        assert!(!matches(&p("/a/-"), &[Member("a"), Index(0)]));
        assert!(matches(&p("/a~1b"), &[Member("a/b")]));
    }

    #[test]
    fn descend_splits_selected_from_still_live() {
        let (ts, all, other) = (p("/items/*/ts"), p("/items"), p("/x"));
        let live = [&ts, &all, &other];
        let (selected, below) = descend(&live, 0, Step::Member("items"));
        assert!(selected);
        assert_eq!(below, vec![&ts]);
        let (selected, below) = descend(&below, 1, Step::Index(4));
        assert!(!selected);
        let (selected, below) = descend(&below, 2, Step::Member("ts"));
        assert!(selected && below.is_empty());
        assert_eq!(descend(&[], 0, Step::Member("a")), (false, vec![]));
    }

    fn at(body: &str, pointer: &str) -> Result<Option<String>, StringAtError> {
        string_at(body.as_bytes(), &p(pointer))
    }

    #[test]
    fn string_at_reads_one_string() {
        let body = r#"{"idempotency_key":"k-1","n":{"a":[1,{"b":"x\u0041"}]},"z":1}"#;
        assert_eq!(at(body, "/idempotency_key"), Ok(Some("k-1".into())));
        assert_eq!(at(body, "/n/a/1/b"), Ok(Some("xA".into())));
        assert_eq!(at(r#""top""#, ""), Ok(Some("top".into())));
        assert_eq!(at(r#"{"a/b":{"~":"s"}}"#, "/a~1b/~0"), Ok(Some("s".into())));
    }

    #[test]
    fn string_at_tells_missing_from_wrong() {
        let body = r#"{"k":"v","n":7,"o":{},"a":["x"],"nil":null}"#;
        assert_eq!(at(body, "/missing"), Ok(None));
        assert_eq!(at(body, "/k/deeper"), Ok(None));
        assert_eq!(at(body, "/a/1"), Ok(None));
        assert_eq!(at(body, "/a/-"), Ok(None));
        assert_eq!(at(body, "/a/01"), Ok(None));
        assert_eq!(at(body, "/a/0"), Ok(Some("x".into())));
        assert_eq!(at(body, "/nil"), Ok(None), "null is nothing there");
        for wrong in ["/n", "/o", "/a", ""] {
            assert_eq!(at(body, wrong), Err(StringAtError::NotAString), "{wrong}");
        }
        assert_eq!(at("{\"k\":", "/k"), Err(StringAtError::NotJson));
        assert_eq!(at("{\"k\":\"v\"} x", "/k"), Err(StringAtError::NotJson));
        assert_eq!(at(body, "/*"), Err(StringAtError::Wildcard));
        // Numbers no float holds are JSON all the same, on the path or off it.
        let big = r#"{"k":"v","n":1e400,"a":[1e400,"s"],"m":-1e999}"#;
        assert_eq!(at(big, "/k"), Ok(Some("v".into())));
        assert_eq!(at(big, "/a/1"), Ok(Some("s".into())));
        // On the pointer's path serde_json reads the number, and refuses it: still a
        // refusal, under another name.
        assert_eq!(at(big, "/n"), Err(StringAtError::NotJson));
        assert_eq!(at(big, "/a/0"), Err(StringAtError::NotJson));
        assert_eq!(at(big, "/m/x"), Err(StringAtError::NotJson));
    }

    #[test]
    fn string_at_refuses_a_repeated_member_on_the_path_only() {
        assert_eq!(
            at(r#"{"k":"a","k":"b"}"#, "/k"),
            Err(StringAtError::Ambiguous)
        );
        assert_eq!(
            at(r#"{"k":"a","k":"a"}"#, "/k"),
            Err(StringAtError::Ambiguous)
        );
        assert_eq!(
            at(r#"{"o":{"k":"a"},"o":{"j":1}}"#, "/o/k"),
            Err(StringAtError::Ambiguous)
        );
        assert_eq!(at(r#"{"k":"a","x":1,"x":2}"#, "/k"), Ok(Some("a".into())));
        assert_eq!(
            at(r#"{"k\u0031":"a","k1":"b"}"#, "/k1"),
            Err(StringAtError::Ambiguous)
        );
    }
}
