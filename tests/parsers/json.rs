//! A model of JSON documents for the canonical-form properties: strategies that
//! generate documents (numbers beyond 64 bits, strings with every kind of character),
//! a renderer that writes one document many ways (whitespace, member order, string
//! escapes), the canonical text every rendering must reduce to, and one-value mutations.

use std::fmt::Write;

use proptest::prelude::*;

#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    /// A number's literal text: it is kept exactly as written.
    Num(String),
    Str(String),
    Arr(Vec<Json>),
    /// Members in document order.
    Obj(Vec<(String, Json)>),
}

/// RFC 8259 numbers, with integers and exponents well beyond 64 bits.
pub fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        "-?(0|[1-9][0-9]{0,40})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,4})?",
        // Around u64::MAX and i64::MIN, where a parser that rounds would blur them.
        "1844674407370955161[0-9]",
        "-922337203685477580[0-9]",
        "[1-9][0-9]{19,60}",
    ]
}

/// Short strings over characters that need care: quotes, backslashes, controls,
/// non-ASCII, astral-plane characters.
pub fn text() -> impl Strategy<Value = String> {
    const SPECIAL: &[char] = &[
        '"',
        '\\',
        '/',
        '\u{7f}',
        '\u{e9}',
        '\u{2028}',
        '\u{fffd}',
        '\u{1f600}',
    ];
    let ch = prop_oneof![
        4 => proptest::char::range('a', 'e'),
        1 => prop::sample::select(SPECIAL),
        1 => proptest::char::range('\0', '\x1f'),
        1 => any::<char>(),
    ];
    prop::collection::vec(ch, 0..6).prop_map(String::from_iter)
}

/// Members with distinct keys, in a random order.
pub fn members(value: impl Strategy<Value = Json>) -> impl Strategy<Value = Vec<(String, Json)>> {
    prop::collection::btree_map(text(), value, 0..5)
        .prop_map(|m| m.into_iter().collect::<Vec<_>>())
        .prop_shuffle()
}

/// Documents without repeated keys, up to four levels deep.
pub fn document() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        number().prop_map(Json::Num),
        text().prop_map(Json::Str),
    ];
    leaf.prop_recursive(4, 40, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Json::Arr),
            members(inner).prop_map(Json::Obj),
        ]
    })
}

/// The canonical text of a document without repeated keys: members sorted by key
/// (byte order), no whitespace, strings escaped as serde_json writes them.
pub fn canonical(j: &Json) -> String {
    match j {
        Json::Null => "null".into(),
        Json::Bool(b) => b.to_string(),
        Json::Num(text) => text.clone(),
        Json::Str(s) => serde_json::to_string(s).unwrap(),
        Json::Arr(items) => format!(
            "[{}]",
            items.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        Json::Obj(members) => {
            let mut sorted: Vec<&(String, Json)> = members.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            let inner: Vec<String> = sorted
                .iter()
                .map(|(k, v)| format!("{}:{}", serde_json::to_string(k).unwrap(), canonical(v)))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
    }
}

/// How to write a document: a stream of choices (whitespace, escapes, member order).
pub struct Style<'a> {
    choices: &'a [u8],
    at: usize,
}

impl<'a> Style<'a> {
    pub fn new(choices: &'a [u8]) -> Self {
        Self { choices, at: 0 }
    }

    fn pick(&mut self, n: usize) -> usize {
        let Some(c) = self.choices.get(self.at % self.choices.len().max(1)) else {
            return 0;
        };
        self.at += 1;
        *c as usize % n
    }

    fn ws(&mut self, out: &mut String) {
        out.push_str(["", "", " ", "\n", "\t", "\r\n  ", "  "][self.pick(7)]);
    }
}

/// Writes `j` as JSON text in `style`. Members keep their order unless `reorder`.
pub fn render(j: &Json, style: &mut Style<'_>, reorder: bool) -> String {
    let mut out = String::new();
    style.ws(&mut out);
    write_value(j, style, reorder, &mut out);
    style.ws(&mut out);
    out
}

fn write_value(j: &Json, style: &mut Style<'_>, reorder: bool, out: &mut String) {
    match j {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Num(text) => out.push_str(text),
        Json::Str(s) => write_string(s, style, out),
        Json::Arr(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                separator(i, style, out);
                write_value(item, style, reorder, out);
                style.ws(out);
            }
            out.push(']');
        }
        Json::Obj(members) => {
            let mut members: Vec<&(String, Json)> = members.iter().collect();
            if reorder && !members.is_empty() {
                let by = style.pick(members.len());
                members.rotate_left(by);
                if style.pick(2) == 1 {
                    members.reverse();
                }
            }
            out.push('{');
            for (i, (key, value)) in members.iter().enumerate() {
                separator(i, style, out);
                write_string(key, style, out);
                style.ws(out);
                out.push(':');
                style.ws(out);
                write_value(value, style, reorder, out);
                style.ws(out);
            }
            out.push('}');
        }
    }
}

fn separator(i: usize, style: &mut Style<'_>, out: &mut String) {
    if i > 0 {
        out.push(',');
    }
    style.ws(out);
}

/// A string literal, each character written raw or escaped as `style` picks (where
/// JSON allows a choice).
fn write_string(s: &str, style: &mut Style<'_>, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        let short = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '/' => Some("\\/"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            _ => None,
        };
        let must_escape = c == '"' || c == '\\' || c < ' ';
        match (style.pick(4), short) {
            (0, Some(e)) => out.push_str(e),
            (0 | 1, _) => unicode_escape(c, style.pick(2) == 1, out),
            _ if must_escape => unicode_escape(c, false, out),
            _ => out.push(c),
        }
    }
    out.push('"');
}

fn unicode_escape(c: char, upper: bool, out: &mut String) {
    let mut units = [0u16; 2];
    for unit in c.encode_utf16(&mut units) {
        if upper {
            write!(out, "\\u{unit:04X}").unwrap();
        } else {
            write!(out, "\\u{unit:04x}").unwrap();
        }
    }
}

/// `j` with one value changed: the `at`-th node in pre-order (modulo their number)
/// is replaced by a different value, `how` choosing the change.
pub fn mutate(j: &Json, at: usize, how: usize) -> Json {
    let mut left = at % count(j);
    change(j, &mut left, how)
}

fn count(j: &Json) -> usize {
    1 + match j {
        Json::Arr(items) => items.iter().map(count).sum(),
        Json::Obj(members) => members.iter().map(|(_, v)| count(v)).sum(),
        _ => 0,
    }
}

fn change(j: &Json, left: &mut usize, how: usize) -> Json {
    if *left == 0 {
        *left = usize::MAX;
        return changed(j, how);
    }
    *left -= 1;
    match j {
        Json::Arr(items) => Json::Arr(items.iter().map(|v| change(v, left, how)).collect()),
        Json::Obj(members) => Json::Obj(
            (members.iter())
                .map(|(k, v)| (k.clone(), change(v, left, how)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn changed(j: &Json, how: usize) -> Json {
    match j {
        Json::Null => [
            Json::Bool(false),
            Json::Num("0".into()),
            Json::Str(String::new()),
        ][how % 3]
            .clone(),
        Json::Bool(b) => Json::Bool(!b),
        Json::Num(text) => {
            // Append a digit (not to a bare 0: `00` is no number), or bump the last one.
            let mut t = text.clone();
            if how % 2 == 1 && t.trim_start_matches('-') != "0" {
                t.push('0');
            } else {
                let last = t.pop().unwrap() as u8 - b'0';
                t.push(char::from(b'0' + (last + 1) % 10));
            }
            Json::Num(t)
        }
        Json::Str(s) => Json::Str(format!("{s}{}", ['x', '\0', '"', '\u{1f600}'][how % 4])),
        Json::Arr(items) if how % 2 == 0 && !items.is_empty() => {
            Json::Arr(items[..items.len() - 1].to_vec())
        }
        Json::Arr(items) => Json::Arr([items.clone(), vec![Json::Null]].concat()),
        Json::Obj(members) => {
            let mut fresh = String::from("k");
            while members.iter().any(|(k, _)| *k == fresh) {
                fresh.push('\u{1}');
            }
            let mut m = members.clone();
            match (how % 3, m.is_empty()) {
                (0, false) => drop(m.remove(0)),
                (1, false) => m[0].0 = fresh,
                _ => m.push((fresh, Json::Null)),
            }
            Json::Obj(m)
        }
    }
}
