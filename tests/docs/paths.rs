//! Source paths named in prose exist: a file moved or renamed leaves no document, code
//! comment or Lua script pointing at its old place. History (CHANGELOG.md,
//! docs/history/) names what was there then, and is not checked.
//!
//! A mention is a token of a line (split at spaces, quotes, brackets and `:` so that
//! `src/a.rs:12` reads as `src/a.rs`; an anchor `#...` is dropped) that
//! - starts at a top-level directory of the repository ([`TOP`]) and names a file by
//!   one of [`EXTENSIONS`], a directory by a trailing `/`, or (as a whole code span)
//!   nothing else, when it must exist as either, or
//! - names a `.rs` file by a relative path (`store/redis/slots.rs`, lower case, with a
//!   `/`), as code comments and ARCHITECTURE.md's layout do: relative to `src/` or to
//!   the mentioning file's own directory.
//!
//! Placeholders and globs (`<target>`, `*`, `{a,b}`, `$X`, `...`) are skipped, as are
//! paths under build output (`target/`) and the local state (`.state/`).

use std::path::{Path, PathBuf};

use super::{documents, walk, ROOT};

/// The top-level directories a repository path starts at.
const TOP: [&str; 12] = [
    "src/",
    "lua/",
    "migrations/",
    "deploy/",
    "loadtest/",
    "fleet/",
    "tests/",
    "fuzz/",
    "docs/",
    "xtask/",
    "examples/",
    ".ci/",
];

/// The extensions that make a token a file's path.
const EXTENSIONS: [&str; 15] = [
    "rs", "lua", "sql", "md", "toml", "yml", "yaml", "js", "sh", "json", "py", "proto", "cfg",
    "conf", "txt",
];

/// The part of a line of Rust that is a comment (`//`, `///`, `//!`), if any.
fn rust_comment(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    if trimmed.starts_with("//") {
        return Some(trimmed);
    }
    line.find(" // ").map(|at| &line[at + 1..])
}

/// `(line number, token, whether the token is a whole code span)` of every candidate
/// path of `text` (only comments when `rust`).
fn mentions(text: &str, rust: bool) -> Vec<(usize, String, bool)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = match rust {
            true => match rust_comment(line) {
                Some(comment) => comment,
                None => continue,
            },
            false => line,
        };
        for (i, part) in line.split('`').enumerate() {
            let spanned = i % 2 == 1;
            let separators = |c: char| c.is_whitespace() || "'\"()[],;|=:!?".contains(c);
            for token in part.split(separators) {
                let token = token.split('#').next().unwrap_or("");
                let token = token.trim_end_matches(['.', ',']);
                if !token.is_empty() {
                    let whole = spanned && part.trim() == token;
                    out.push((n + 1, token.to_string(), whole));
                }
            }
        }
    }
    out
}

/// Whether `token`, mentioned in a file in `dir`, names something `root` lacks.
fn is_stale(root: &Path, dir: &Path, token: &str, whole_span: bool) -> bool {
    let placeholder = ["<", ">", "*", "{", "}", "$", "...", "…", "://"];
    if placeholder.iter().any(|p| token.contains(p))
        || token.contains("target/")
        || token.contains(".state/")
    {
        return false;
    }
    let last = token.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    let extension = last.rsplit_once('.').map(|(_, e)| e);
    let is_file = extension.is_some_and(|e| EXTENSIONS.contains(&e));
    if TOP.iter().any(|t| token.starts_with(t)) {
        let path = root.join(token);
        return match (is_file, token.ends_with('/')) {
            (true, _) => !path.is_file(),
            (false, true) => !path.is_dir(),
            // `tests/it`, `fleet/src/patroni` as a code span: a file or directory
            // without a dot. In prose such a token may be a name rather than a path
            // (`fuzz/canonical_json`, a fuzz target), and a name with another
            // extension (`docs/x.png`) is not a source path.
            (false, false) => whole_span && extension.is_none() && !path.exists(),
        };
    }
    let relative = extension == Some("rs")
        && token.contains('/')
        && !token.starts_with(['.', '/'])
        && (token.chars())
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_/.".contains(c));
    relative && !root.join("src").join(token).is_file() && !dir.join(token).is_file()
}

/// Every stale source path mentioned in `files`, as "file:line: `token`".
fn stale_paths(root: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut stale = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let rust = file.extension().is_some_and(|e| e == "rs");
        let dir = file.parent().unwrap_or(root);
        let shown = file.strip_prefix(root).unwrap_or(file).display();
        for (line, token, whole) in mentions(&text, rust) {
            if is_stale(root, dir, &token, whole) {
                stale.push(format!("{shown}:{line}: `{token}`"));
            }
        }
    }
    stale
}

/// The files whose mentions are checked: the documents but the history, every Rust
/// file of src/ (its comments) and the Lua scripts.
fn checked_files(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = (documents(root).into_iter())
        .filter(|f| !f.ends_with("CHANGELOG.md") && !f.starts_with(root.join("docs/history")))
        .collect();
    files.extend(walk(&root.join("src"), &["rs"]));
    files.extend(walk(&root.join("lua"), &["lua"]));
    files
}

#[test]
fn every_source_path_named_exists() {
    let root = Path::new(ROOT);
    let files = checked_files(root);
    for expected in [
        "README.md",
        "ARCHITECTURE.md",
        "docs/http.md",
        "lua/claim.lua",
        "src/lib.rs",
    ] {
        assert!(
            files.iter().any(|f| f.ends_with(expected)),
            "{expected} not checked"
        );
    }
    let stale = stale_paths(root, &files);
    assert!(
        stale.is_empty(),
        "paths that do not exist:\n{}",
        stale.join("\n")
    );
}

/// A moved file named from a Lua script, a document and a code comment (by its
/// repository path and relative to src/) is found; existing files and directories,
/// placeholders, globs, code outside comments and URLs are not.
#[test]
fn the_path_check_finds_a_moved_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("src/store/redis")).unwrap();
    std::fs::create_dir_all(root.join("lua")).unwrap();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::write(root.join("src/store/redis/slots.rs"), "").unwrap();
    std::fs::write(root.join("src/store/redis/mod.rs"), "//! `slots.rs`\n").unwrap();
    std::fs::write(
        root.join("src/store/mod.rs"),
        "//! See `store/redis/slots.rs`, `redis/slots.rs` and `store/slots.rs` (moved).\n\
         let p = \"src/gone.rs\"; // src/store/redis/slots.rs:12, src/store/, src/store/redis\n\
         //! Found by fuzz/no_such_target; `src/store/redis` and `src/store/gone`.\n\
         // the record's layout (redis/slots.rs; redis/gone.rs)\n\
         /// Each `fuzz/corpus/<target>/`, `tests/it/*.rs`, https://x.org/src/no.rs\n",
    )
    .unwrap();
    std::fs::write(
        root.join("lua/claim.lua"),
        "-- the record's slot (same slot, see src/store/slots.rs).\n",
    )
    .unwrap();
    std::fs::write(
        root.join("docs/a.md"),
        "Read [`src/store/redis/slots.rs`](../src/store/redis/slots.rs), not `src/store/old/`\n\
         or docs/b.md#part; `migrations/0001.sql`.\n",
    )
    .unwrap();
    let files = [
        root.join("src/store/mod.rs"),
        root.join("src/store/redis/mod.rs"),
        root.join("lua/claim.lua"),
        root.join("docs/a.md"),
    ];
    assert_eq!(
        stale_paths(root, &files),
        [
            "src/store/mod.rs:1: `store/slots.rs`",
            "src/store/mod.rs:3: `src/store/gone`",
            "src/store/mod.rs:4: `redis/gone.rs`",
            "lua/claim.lua:1: `src/store/slots.rs`",
            "docs/a.md:1: `src/store/old/`",
            "docs/a.md:2: `docs/b.md`",
            "docs/a.md:2: `migrations/0001.sql`",
        ]
    );
}
