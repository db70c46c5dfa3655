//! Relative Markdown links: every link of the documents names a file that exists and,
//! in a Markdown file, a heading of it.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::{documents, prose, ROOT};

/// The targets of inline links and images, and of reference definitions.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let trimmed = line.trim_start();
        if let Some(def) = trimmed.strip_prefix('[').and_then(|r| r.split_once("]: ")) {
            out.push(def.1.split_whitespace().next().unwrap_or("").to_string());
        }
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let mut depth = 0;
            let end = after.char_indices().find_map(|(i, c)| match c {
                '(' => {
                    depth += 1;
                    None
                }
                ')' if depth == 0 => Some(i),
                ')' => {
                    depth -= 1;
                    None
                }
                _ => None,
            });
            let Some(end) = end else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            out.push(target.trim_matches(['<', '>']).to_string());
            rest = &after[end..];
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation other than `-` and `_`
/// dropped, spaces as `-`.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // `[text](url)` reads as its text.
    while let Some(open) = rest.find('[') {
        match rest[open..].find("](").map(|i| open + i) {
            Some(close) => {
                text.push_str(&rest[..open]);
                text.push_str(&rest[open + 1..close]);
                rest = rest[close..].split_once(')').map_or("", |(_, r)| r);
            }
            None => break,
        }
    }
    text.push_str(rest);
    (text.trim().to_lowercase().chars())
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file: its headings (repeats numbered as GitHub does) and
/// explicit `id="..."` / `name="..."` anchors.
pub(super) fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced {
            continue;
        }
        if let Some(h) = line.strip_prefix('#') {
            let h = h.trim_start_matches('#');
            if h.starts_with(' ') {
                let base = slug(h);
                let mut anchor = base.clone();
                let mut n = 0;
                while !seen.insert(anchor.clone()) {
                    n += 1;
                    anchor = format!("{base}-{n}");
                }
            }
        }
        for attr in ["id=\"", "name=\""] {
            for (at, _) in line.match_indices(attr) {
                if let Some(value) = line[at + attr.len()..].split('"').next() {
                    seen.insert(value.to_string());
                }
            }
        }
    }
    seen
}

/// Every relative link of `files` that names a missing file or heading.
fn broken_links(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut broken = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let shown = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        for target in links(&text) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let resolved = match path {
                "" => file.clone(),
                p if p.starts_with('/') => root.join(p.trim_start_matches('/')),
                p => file.parent().unwrap().join(p),
            };
            if !resolved.exists() {
                broken.push(format!("{shown}: `{target}`: no such file"));
                continue;
            }
            let is_md = resolved.extension().is_some_and(|e| e == "md");
            if !anchor.is_empty() && is_md {
                let target_text = std::fs::read_to_string(&resolved).unwrap_or_default();
                if !anchors(&target_text).contains(anchor) {
                    broken.push(format!("{shown}: `{target}`: no heading with that anchor"));
                }
            }
        }
    }
    broken
}

#[test]
fn relative_links_resolve() {
    let root = Path::new(ROOT);
    let broken = broken_links(root, &documents(root));
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The link check itself: a missing file and a missing heading are both found.
#[test]
fn the_link_check_finds_a_missing_file_and_a_missing_heading() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.md");
    std::fs::write(dir.path().join("b.md"), "# B\n\n## The `[redis]` section\n").unwrap();
    std::fs::write(
        &a,
        "# A\n\n[ok](b.md#the-redis-section) [self](#a) [gone](c.md) [bad](b.md#nope)\n\
         `[not](a-link.md)`\n```\n[not](either.md)\n```\n[web](https://example.com/x)\n",
    )
    .unwrap();
    let broken = broken_links(dir.path(), &[a]);
    assert_eq!(
        broken,
        [
            "a.md: `c.md`: no such file",
            "a.md: `b.md#nope`: no heading with that anchor"
        ]
    );
}
