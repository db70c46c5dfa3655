//! The canonical form of a JSON body, for fingerprints: object keys sorted,
//! insignificant whitespace dropped, strings re-escaped one way (`"\u0041"` is `"A"`),
//! numbers kept exactly as written (no float rounding: `18446744073709551617` and
//! `...616` differ). A body that is not strict JSON, nests deeper than
//! [`MAX_DEPTH`], or repeats a key in one object has no canonical form: the caller
//! hashes its raw bytes instead, so two such bodies match only if identical.
//!
//! [`canonicalize_ignoring`] also leaves out every value a pointer selects
//! (`fingerprint.ignore_json`): the parser knows the path of each value it reads. A left
//! out member is still read (it must be valid JSON, and counts for repeated keys); a left
//! out array element shifts the later ones; the pointer `""` leaves out the whole
//! document (the canonical form is empty).

use super::pointer::{descend, JsonPointer, Step};

/// Deepest nesting canonicalised.
pub const MAX_DEPTH: usize = 128;

/// The canonical bytes of `input`, or `None` when it has none (see the module docs).
pub fn canonicalize(input: &[u8]) -> Option<Vec<u8>> {
    canonicalize_ignoring(input, &[])
}

/// The canonical bytes of `input` without the values `ignore` selects, or `None` when
/// `input` has no canonical form. With no pointers, [`canonicalize`].
pub fn canonicalize_ignoring(input: &[u8], ignore: &[JsonPointer]) -> Option<Vec<u8>> {
    let live: Vec<&JsonPointer> = ignore.iter().collect();
    let whole = live.iter().any(|p| p.segments().is_empty());
    let mut parser = Parser { input, pos: 0 };
    let mut out = Vec::with_capacity(input.len());
    parser.value(&mut out, 0, &live)?;
    parser.skip_ws();
    if whole {
        out.clear();
    }
    (parser.pos == input.len()).then_some(out)
}

struct Parser<'a> {
    input: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.input.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.input.get(self.pos).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.pos += 1)
    }

    /// A value at `depth`, whose path every pointer of `live` matches so far.
    fn value(&mut self, out: &mut Vec<u8>, depth: usize, live: &[&JsonPointer]) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'{' => self.object(out, depth, live),
            b'[' => self.array(out, depth, live),
            b'"' => {
                let s = self.string()?;
                out.extend_from_slice(serde_json::to_string(&s).ok()?.as_bytes());
                Some(())
            }
            b't' => self.literal(out, b"true"),
            b'f' => self.literal(out, b"false"),
            b'n' => self.literal(out, b"null"),
            _ => self.number(out),
        }
    }

    fn literal(&mut self, out: &mut Vec<u8>, word: &[u8]) -> Option<()> {
        let end = self.pos + word.len();
        (self.input.get(self.pos..end)? == word).then_some(())?;
        self.pos = end;
        out.extend_from_slice(word);
        Some(())
    }

    /// RFC 8259 number grammar; the literal text is kept.
    fn number(&mut self, out: &mut Vec<u8>) -> Option<()> {
        let start = self.pos;
        let digits = |p: &mut Self| {
            let from = p.pos;
            while p.input.get(p.pos).is_some_and(u8::is_ascii_digit) {
                p.pos += 1;
            }
            p.pos > from
        };
        if self.input.get(self.pos) == Some(&b'-') {
            self.pos += 1;
        }
        match self.input.get(self.pos)? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => {
                digits(self);
            }
            _ => return None,
        }
        if self.input.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            digits(self).then_some(())?;
        }
        if let Some(b'e' | b'E') = self.input.get(self.pos) {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.input.get(self.pos) {
                self.pos += 1;
            }
            digits(self).then_some(())?;
        }
        out.extend_from_slice(&self.input[start..self.pos]);
        Some(())
    }

    /// A string token, decoded (escapes resolved, validated by serde_json).
    fn string(&mut self) -> Option<String> {
        let start = self.pos;
        self.pos += 1; // opening quote
        loop {
            match *self.input.get(self.pos)? {
                b'"' => break,
                b'\\' => self.pos += 2,
                _ => self.pos += 1,
            }
        }
        self.pos += 1; // closing quote
        serde_json::from_slice(self.input.get(start..self.pos)?).ok()
    }

    fn array(&mut self, out: &mut Vec<u8>, depth: usize, live: &[&JsonPointer]) -> Option<()> {
        self.eat(b'[')?;
        out.push(b'[');
        if self.eat(b']').is_some() {
            out.push(b']');
            return Some(());
        }
        let mut written = 0;
        for i in 0.. {
            let (ignored, below) = descend(live, depth, Step::Index(i));
            if ignored {
                self.value(&mut Vec::new(), depth + 1, &[])?;
            } else {
                if written > 0 {
                    out.push(b',');
                }
                self.value(out, depth + 1, &below)?;
                written += 1;
            }
            match self.peek()? {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    break;
                }
                _ => return None,
            }
        }
        out.push(b']');
        Some(())
    }

    fn object(&mut self, out: &mut Vec<u8>, depth: usize, live: &[&JsonPointer]) -> Option<()> {
        self.eat(b'{')?;
        // An ignored member keeps its key (for the repeated-key rule) but no value.
        let mut members: Vec<(String, Option<Vec<u8>>)> = Vec::new();
        if self.eat(b'}').is_none() {
            loop {
                (self.peek()? == b'"').then_some(())?;
                let key = self.string()?;
                self.eat(b':')?;
                let (ignored, below) = descend(live, depth, Step::Member(&key));
                let mut value = Vec::new();
                self.value(&mut value, depth + 1, &below)?;
                members.push((key, (!ignored).then_some(value)));
                match self.peek()? {
                    b',' => self.pos += 1,
                    b'}' => {
                        self.pos += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        members.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        if members.windows(2).any(|w| w[0].0 == w[1].0) {
            return None; // a repeated key: parsers disagree on what it means
        }
        out.push(b'{');
        let kept = members.iter().filter_map(|(k, v)| Some((k, v.as_ref()?)));
        for (i, (key, value)) in kept.enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(serde_json::to_string(key).ok()?.as_bytes());
            out.push(b':');
            out.extend_from_slice(value);
        }
        out.push(b'}');
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> Option<String> {
        canonicalize(s.as_bytes()).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn sorts_keys_and_drops_whitespace() {
        assert_eq!(canon(r#"{ "b":2, "a":1 }"#).unwrap(), r#"{"a":1,"b":2}"#);
        assert_eq!(
            canon("{\"x\":{\"d\":[1, 2 ,{\"z\":null,\"y\":true}],\"c\":\"s\"}}\n").unwrap(),
            r#"{"x":{"c":"s","d":[1,2,{"y":true,"z":null}]}}"#
        );
        assert_eq!(canon("[]").unwrap(), "[]");
        assert_eq!(canon(" {} ").unwrap(), "{}");
    }

    #[test]
    fn strings_are_escaped_one_way() {
        assert_eq!(canon(r#""\u0041\/""#).unwrap(), r#""A/""#);
        assert_eq!(canon(r#"{"\u0062":1,"a":2}"#).unwrap(), r#"{"a":2,"b":1}"#);
    }

    #[test]
    fn numbers_keep_their_exact_text() {
        assert_ne!(canon("18446744073709551617"), canon("18446744073709551616"));
        assert_ne!(canon("0.1000000000000000001"), canon("0.1"));
        assert_eq!(canon("-1.5e+10").unwrap(), "-1.5e+10");
    }

    fn without(s: &str, pointers: &[&str]) -> Option<String> {
        let pointers: Vec<JsonPointer> = pointers.iter().map(|p| p.parse().unwrap()).collect();
        canonicalize_ignoring(s.as_bytes(), &pointers).map(|v| String::from_utf8(v).unwrap())
    }

    #[test]
    fn ignored_members_and_elements_are_left_out() {
        let body =
            r#"{"ts":1,"amount":{"v":5,"ts":"x"},"items":[{"id":1,"ts":9},{"ts":8,"id":2}]}"#;
        assert_eq!(
            without(body, &["/ts", "/items/*/ts"]).unwrap(),
            r#"{"amount":{"ts":"x","v":5},"items":[{"id":1},{"id":2}]}"#
        );
        assert_eq!(
            without(body, &["/*/ts"]).unwrap(),
            r#"{"amount":{"v":5},"items":[{"id":1,"ts":9},{"id":2,"ts":8}],"ts":1}"#
        );
        assert_eq!(without("[1,2,3]", &["/0"]).unwrap(), "[2,3]");
        assert_eq!(without("[1,2,3]", &["/1"]).unwrap(), "[1,3]");
        assert_eq!(without("[1,2,3]", &["/*"]).unwrap(), "[]");
        assert_eq!(without(r#"{"a":1}"#, &["/a"]).unwrap(), "{}");
        assert_eq!(without(r#"{"a":1}"#, &[""]).unwrap(), "");
        assert_eq!(
            without(r#"{"a/b":1,"c":2}"#, &["/a~1b"]).unwrap(),
            r#"{"c":2}"#
        );
        // Nothing matched: the canonical form of canonicalize.
        let plain = r#"{ "b":[1, {"y":2}], "a":"\u0041" }"#;
        assert_eq!(without(plain, &["/zz", "/b/7", "/a/x"]), canon(plain));
    }

    #[test]
    fn ignoring_does_not_excuse_invalid_json_or_repeated_keys() {
        assert_eq!(without(r#"{"ts":tru,"a":1}"#, &["/ts"]), None);
        assert_eq!(without(r#"{"ts":1,"ts":2}"#, &["/ts"]), None);
        assert_eq!(without("[1,", &["/*"]), None);
    }

    #[test]
    fn repeated_keys_and_invalid_json_have_no_canonical_form() {
        assert_eq!(canon(r#"{"to":"alice","to":"bob"}"#), None);
        for bad in [
            "{",
            "[1,]",
            "{\"a\" 1}",
            "01",
            "1.",
            "tru",
            "\"abc",
            "{} x",
            "",
            "nan",
        ] {
            assert_eq!(canon(bad), None, "{bad:?}");
        }
        let deep = "[".repeat(MAX_DEPTH + 2) + &"]".repeat(MAX_DEPTH + 2);
        assert_eq!(canon(&deep), None);
    }
}
