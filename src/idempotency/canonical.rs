//! The canonical form of a JSON body, for fingerprints: object keys sorted,
//! insignificant whitespace dropped, strings re-escaped one way (`"\u0041"` is `"A"`),
//! numbers kept exactly as written (no float rounding: `18446744073709551617` and
//! `...616` differ). A body that is not strict JSON, nests deeper than
//! [`MAX_DEPTH`], or repeats a key in one object has no canonical form: the caller
//! hashes its raw bytes instead, so two such bodies match only if identical.

/// Deepest nesting canonicalised.
pub const MAX_DEPTH: usize = 128;

/// The canonical bytes of `input`, or `None` when it has none (see the module docs).
pub fn canonicalize(input: &[u8]) -> Option<Vec<u8>> {
    let mut parser = Parser { input, pos: 0 };
    let mut out = Vec::with_capacity(input.len());
    parser.value(&mut out, 0)?;
    parser.skip_ws();
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

    fn value(&mut self, out: &mut Vec<u8>, depth: usize) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'{' => self.object(out, depth),
            b'[' => self.array(out, depth),
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

    fn array(&mut self, out: &mut Vec<u8>, depth: usize) -> Option<()> {
        self.eat(b'[')?;
        out.push(b'[');
        if self.eat(b']').is_some() {
            out.push(b']');
            return Some(());
        }
        loop {
            self.value(out, depth + 1)?;
            match self.peek()? {
                b',' => {
                    self.pos += 1;
                    out.push(b',');
                }
                b']' => {
                    self.pos += 1;
                    out.push(b']');
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    fn object(&mut self, out: &mut Vec<u8>, depth: usize) -> Option<()> {
        self.eat(b'{')?;
        let mut members: Vec<(String, Vec<u8>)> = Vec::new();
        if self.eat(b'}').is_none() {
            loop {
                (self.peek()? == b'"').then_some(())?;
                let key = self.string()?;
                self.eat(b':')?;
                let mut value = Vec::new();
                self.value(&mut value, depth + 1)?;
                members.push((key, value));
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
        for (i, (key, value)) in members.iter().enumerate() {
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
