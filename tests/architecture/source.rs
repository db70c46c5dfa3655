//! Rust source read as text for the dependency rules: comments and literals blanked,
//! and the module paths a file names through `crate::` and `super::`.

/// A module path, `["store", "redis"]`.
pub type ModPath = Vec<String>;

/// `text` with comments, string and char literals replaced by spaces (lines kept).
pub fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |out: &mut String, from: &[char]| {
        out.extend(from.iter().map(|&c| if c == '\n' { '\n' } else { ' ' }))
    };
    while i < chars.len() {
        let rest = &chars[i..];
        let end = if rest.starts_with(&['/', '/']) {
            rest.iter().position(|&c| c == '\n').unwrap_or(rest.len())
        } else if rest.starts_with(&['/', '*']) {
            (2..rest.len())
                .find(|&k| rest[k - 1] == '*' && rest[k] == '/')
                .map_or(rest.len(), |k| k + 1)
        } else if rest[0] == '"' || (rest[0] == 'r' && matches!(rest.get(1), Some('"' | '#'))) {
            string_end(rest)
        } else if rest[0] == '\'' && rest.get(1) == Some(&'\\') {
            (2..rest.len())
                .find(|&k| rest[k] == '\'')
                .map_or(1, |k| k + 1)
        } else if rest[0] == '\'' && rest.get(2) == Some(&'\'') {
            3
        } else {
            out.push(rest[0]);
            i += 1;
            continue;
        };
        blank(&mut out, &rest[..end]);
        i += end;
    }
    out
}

/// The length of the (raw) string literal at the start of `rest`.
fn string_end(rest: &[char]) -> usize {
    if rest[0] == '"' {
        let mut k = 1;
        while k < rest.len() && rest[k] != '"' {
            k += if rest[k] == '\\' { 2 } else { 1 };
        }
        return (k + 1).min(rest.len());
    }
    let hashes = rest[1..].iter().take_while(|&&c| c == '#').count();
    if rest.get(1 + hashes) != Some(&'"') {
        return 1; // an identifier starting with r
    }
    let close: Vec<char> = std::iter::once('"')
        .chain(std::iter::repeat('#').take(hashes))
        .collect();
    (2 + hashes..rest.len())
        .find(|&k| rest[k..].starts_with(&close))
        .map_or(rest.len(), |k| k + close.len())
}

/// The module paths `code` of `module` names through `crate::` or `super::`.
pub fn references(module: &[String], code: &str) -> Vec<ModPath> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let word_start = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let base: Option<(ModPath, usize)> = if !word_start {
            None
        } else if code[i..].starts_with("crate::") {
            Some((Vec::new(), i + 7))
        } else if code[i..].starts_with("super::") {
            let mut base = module.to_vec();
            let mut at = i;
            while code[at..].starts_with("super::") {
                base.pop();
                at += 7;
            }
            Some((base, at))
        } else {
            None
        };
        match base {
            Some((base, at)) => {
                let (paths, end) = expand(&code[at..]);
                found.extend(paths.into_iter().map(|p| [base.clone(), p].concat()));
                i = at + end.max(1);
            }
            None => i += 1,
        }
    }
    found
}

/// The paths of a `use` tree at the start of `text` (`a::b::C`, `a::{b, c::D}`) and how
/// many bytes it spans.
fn expand(text: &str) -> (Vec<ModPath>, usize) {
    let mut prefix = ModPath::new();
    let mut i = 0;
    let bytes = text.as_bytes();
    loop {
        while i < text.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < text.len() && bytes[i] == b'{' {
            let mut paths = Vec::new();
            i += 1;
            loop {
                let (inner, used) = expand(&text[i..]);
                paths.extend(inner.into_iter().map(|p| [prefix.clone(), p].concat()));
                i += used;
                while i < text.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b',') {
                    i += 1;
                }
                if i >= text.len() || bytes[i] == b'}' {
                    return (paths, i + 1);
                }
            }
        }
        let start = i;
        while i < text.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        if start == i {
            return (vec![prefix], i);
        }
        let segment = &text[start..i];
        if !matches!(segment, "self") {
            prefix.push(segment.to_owned());
        }
        if text[i..].starts_with("::") {
            i += 2;
        } else {
            return (vec![prefix], i);
        }
    }
}
