//! Pairs of JSON documents, generated: a tree of values written twice (members in
//! another order, other whitespace, strings escaped another way), and once with one
//! value changed. Properties: every generated document has a canonical form (the
//! parser accepts all JSON it should); the two writings of one tree have the same
//! canonical form and fingerprint; the changed tree has a different canonical form and
//! fingerprint.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use http::{HeaderValue, Method, Uri};
use idemgate::idempotency::canonical::canonicalize;
use idemgate::idempotency::Fingerprint;
use libfuzzer_sys::fuzz_target;

/// Nesting kept (well below `canonical::MAX_DEPTH`).
const DEPTH: usize = 24;

#[derive(Arbitrary, Debug, Clone)]
enum Json {
    Null,
    Bool(bool),
    Num(Num),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

/// A number, written as `-?int(.frac)?(e[+-]?exp)?`.
#[derive(Arbitrary, Debug, Clone)]
struct Num {
    negative: bool,
    int: u64,
    frac: Option<u32>,
    exp: Option<(bool, u8)>,
}

impl Num {
    fn text(&self) -> String {
        let mut s = String::new();
        if self.negative {
            s.push('-');
        }
        s.push_str(&self.int.to_string());
        if let Some(frac) = self.frac {
            s.push_str(&format!(".{frac}"));
        }
        if let Some((negative, exp)) = self.exp {
            s.push_str(if negative { "e-" } else { "E+" });
            s.push_str(&exp.to_string());
        }
        s
    }
}

impl Json {
    /// Cuts the tree at `DEPTH` and keeps the first of repeated keys (a repeated key
    /// has no canonical form, on purpose).
    fn normalise(&mut self, depth: usize) {
        match self {
            Json::Arr(items) if depth >= DEPTH => items.clear(),
            Json::Obj(members) if depth >= DEPTH => members.clear(),
            Json::Arr(items) => items.iter_mut().for_each(|v| v.normalise(depth + 1)),
            Json::Obj(members) => {
                let mut seen = std::collections::HashSet::new();
                members.retain(|(k, _)| seen.insert(k.clone()));
                members.iter_mut().for_each(|(_, v)| v.normalise(depth + 1));
            }
            _ => {}
        }
    }

    /// Number of places [`Json::change`] can change.
    fn places(&self) -> usize {
        1 + match self {
            Json::Arr(items) => items.iter().map(Json::places).sum(),
            Json::Obj(members) => members.iter().map(|(_, v)| v.places() + 1).sum(),
            _ => 0,
        }
    }

    /// Changes the value at place `n` (pre-order; an object member's key counts as a
    /// place of its own). Returns whether something changed (always, for `n < places`).
    fn change(&mut self, n: &mut usize) -> bool {
        if *n == 0 {
            match self {
                Json::Null => *self = Json::Bool(false),
                Json::Bool(b) => *b = !*b,
                Json::Num(num) => num.int ^= 1,
                Json::Str(s) => s.push('x'),
                Json::Arr(items) => items.push(Json::Null),
                Json::Obj(members) => {
                    let fresh = fresh_key(members);
                    members.push((fresh, Json::Null));
                }
            }
            return true;
        }
        *n -= 1;
        match self {
            Json::Arr(items) => items.iter_mut().any(|v| v.change(n)),
            Json::Obj(members) => {
                for i in 0..members.len() {
                    if *n == 0 {
                        let fresh = fresh_key(members);
                        members[i].0 = fresh;
                        return true;
                    }
                    *n -= 1;
                    if members[i].1.change(n) {
                        return true;
                    }
                }
                false
            }
            _ => false,
        }
    }
}

fn fresh_key(members: &[(String, Json)]) -> String {
    let mut key = String::from("k");
    while members.iter().any(|(k, _)| *k == key) {
        key.push('k');
    }
    key
}

/// How one document is written.
struct Style<'a> {
    u: Unstructured<'a>,
    /// Rotate every object's members by this much (0: as generated).
    rotate: usize,
}

impl Style<'_> {
    fn pick(&mut self, n: usize) -> usize {
        self.u.choose_index(n).unwrap_or(0)
    }

    fn ws(&mut self, out: &mut String) {
        out.push_str(["", " ", "\n", "\t", "\r\n  "][self.pick(5)]);
    }

    fn string(&mut self, s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            let plain = !matches!(c, '"' | '\\' | '\u{0}'..='\u{1f}');
            match (plain, self.pick(3)) {
                (true, 0 | 1) => out.push(c),
                _ if c == '"' && self.pick(2) == 0 => out.push_str("\\\""),
                _ if c == '\n' && self.pick(2) == 0 => out.push_str("\\n"),
                _ => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
            }
        }
        out.push('"');
    }

    fn write(&mut self, v: &Json, out: &mut String) {
        self.ws(out);
        match v {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Num(n) => out.push_str(&n.text()),
            Json::Str(s) => self.string(s, out),
            Json::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    self.write(item, out);
                }
                self.ws(out);
                out.push(']');
            }
            Json::Obj(members) => {
                out.push('{');
                let len = members.len().max(1);
                for i in 0..members.len() {
                    let (key, value) = &members[(i + self.rotate) % len];
                    if i > 0 {
                        out.push(',');
                    }
                    self.ws(out);
                    self.string(key, out);
                    self.ws(out);
                    out.push(':');
                    self.write(value, out);
                }
                self.ws(out);
                out.push('}');
            }
        }
        self.ws(out);
    }
}

fn fingerprint(body: &[u8]) -> Fingerprint {
    let uri = Uri::from_static("/v1/payments");
    let json = HeaderValue::from_static("application/json; charset=utf-8");
    Fingerprint::new(
        &Default::default(),
        &Method::POST,
        &uri,
        &http::HeaderMap::from_iter([(http::header::CONTENT_TYPE, json)]),
        body,
    )
}

fn write(v: &Json, style: &[u8], rotate: usize) -> String {
    let mut style = Style {
        u: Unstructured::new(style),
        rotate,
    };
    let mut out = String::new();
    style.write(v, &mut out);
    out
}

fuzz_target!(|input: (Json, &[u8], &[u8], u8, usize)| {
    let (mut tree, style_a, style_b, rotate, place) = input;
    tree.normalise(0);
    let a = write(&tree, style_a, 0);
    let b = write(&tree, style_b, usize::from(rotate));
    let canon_a = canonicalize(a.as_bytes()).unwrap_or_else(|| panic!("refused: {a}"));
    let canon_b = canonicalize(b.as_bytes()).unwrap_or_else(|| panic!("refused: {b}"));
    assert_eq!(canon_a, canon_b, "{a} / {b}");
    assert_eq!(fingerprint(a.as_bytes()), fingerprint(b.as_bytes()));

    let mut changed = tree.clone();
    assert!(changed.change(&mut (place % tree.places())));
    let c = write(&changed, style_b, usize::from(rotate));
    let canon_c = canonicalize(c.as_bytes()).unwrap_or_else(|| panic!("refused: {c}"));
    assert_ne!(canon_a, canon_c, "{a} / {c}");
    assert_ne!(fingerprint(a.as_bytes()), fingerprint(c.as_bytes()));
});
