//! Checks on the documentation, with no server, each with a test that shows it finds a
//! planted fault: every relative Markdown link resolves ([`links`]); no file cites a
//! tracker number ([`tracker`]); every source path the documents, the code's comments
//! and the Lua scripts name exists ([`paths`]); every alert has a runbook entry, every
//! metric a row in `docs/metrics.md`, every problem code a row in `docs/http.md`
//! ([`tables`]; the gRPC table is checked in src/grpc.rs, against `code_for` itself);
//! the README shows how to start on its first screen; no setting's doc comment (the
//! generated reference) carries a measured ratio; and every complete configuration
//! shown in the documents (a TOML block with a `[[routes]]` table) is one the schema
//! accepts; defaults written by hand are the schema's ([`defaults`]).

use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The documents whose links are checked: every Markdown file at the top level, in
/// `docs/` and in `docs/history/`.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in [
        root.to_path_buf(),
        root.join("docs"),
        root.join("docs/history"),
    ] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut md: Vec<PathBuf> = (entries.flatten())
            .map(|e| e.path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "md"))
            .collect();
        md.sort();
        files.extend(md);
    }
    files
}

#[test]
fn the_documents_include_the_readme_and_the_docs_pages() {
    let root = Path::new(ROOT);
    let names: Vec<String> = (documents(root).iter())
        .map(|p| p.strip_prefix(root).unwrap().display().to_string())
        .collect();
    for expected in [
        "README.md",
        "ARCHITECTURE.md",
        "BENCHMARKS.md",
        "RELIABILITY.md",
        "CHANGELOG.md",
        "docs/configuration.md",
        "docs/http.md",
        "docs/operations.md",
        "docs/runbooks.md",
        "docs/metrics.md",
        "docs/redis.md",
        "docs/history/reliability.md",
        "docs/history/benchmarks.md",
        "docs/guarantees.md",
        "docs/security.md",
        "docs/encryption.md",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} not checked: {names:?}"
        );
    }
}

/// Lines outside fenced code blocks, with inline code spans blanked out.
fn prose(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced
            || line.starts_with("    ") && !line.trim_start().starts_with(['-', '*', '|', '['])
        {
            continue;
        }
        let mut kept = String::new();
        for (i, part) in line.split('`').enumerate() {
            kept.push_str(if i % 2 == 0 { part } else { "code" });
        }
        out.push(kept);
    }
    out
}

mod defaults;
mod links;
mod paths;
mod tables;
mod tracker;

/// Every file under `dir` (recursively) whose extension is one of `extensions`, but for
/// build output and fuzzing state (`target/`, `corpus/`, `artifacts/`, `.state/`).
fn walk(dir: &Path, extensions: &[&str]) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if path.is_dir() {
            if !["target", "corpus", "artifacts", ".state", "node_modules"].contains(&&*name) {
                files.extend(walk(&path, extensions));
            }
        } else if (path.extension()).is_some_and(|e| extensions.iter().any(|x| e == *x)) {
            files.push(path);
        }
    }
    files
}

/// What is wrong with the README's first screen and length: `make up` and `make test`
/// (how to start) must appear in its first 40 lines, and it must stay within 300 lines
/// (details live in docs/, linked).
fn readme_problems(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut problems = Vec::new();
    if lines.len() > 300 {
        problems.push(format!("README.md has {} lines (at most 300)", lines.len()));
    }
    for command in ["make up", "make test"] {
        if !lines.iter().take(40).any(|l| l.contains(command)) {
            problems.push(format!("`{command}` is not in README.md's first 40 lines"));
        }
    }
    problems
}

#[test]
fn the_readme_starts_with_how_to_run_it_and_stays_short() {
    let text = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let problems = readme_problems(&text);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A README that is too long, or whose first screen lacks a command, is found.
#[test]
fn the_readme_check_finds_a_late_command_and_a_long_readme() {
    let first = "# x\n\n`make up` and `make test`\n";
    assert!(readme_problems(first).is_empty());
    let late = format!("# x\n`make up`\n{}`make test`\n", "text\n".repeat(40));
    assert_eq!(
        readme_problems(&late),
        ["`make test` is not in README.md's first 40 lines"]
    );
    let long = format!("{first}{}", "text\n".repeat(300));
    assert_eq!(
        readme_problems(&long),
        ["README.md has 303 lines (at most 300)"]
    );
}

/// RELIABILITY.md and BENCHMARKS.md open with the current run's table (in their first
/// 40 lines) and stay under 400 lines; earlier runs live in docs/history/.
#[test]
fn the_measurement_documents_open_with_their_table() {
    let root = Path::new(ROOT);
    for doc in ["RELIABILITY.md", "BENCHMARKS.md"] {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.len() < 400, "{doc} has {} lines", lines.len());
        let table = lines.iter().position(|l| l.starts_with("|---"));
        assert!(
            table.is_some_and(|at| at < 40),
            "{doc}: no table in the first 40 lines (first at {table:?})"
        );
    }
}

/// The TOML blocks of `text` that are whole configurations (they have a route).
fn configurations(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if l.starts_with("```toml") => current = Some(String::new()),
            (Some(_), l) if l.starts_with("```") => blocks.extend(current.take()),
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            _ => {}
        }
    }
    blocks.retain(|b| b.contains("[[routes]]"));
    blocks
}

/// The example configurations of the README and docs/ are valid: a renamed or removed
/// setting, or a value the schema refuses, fails here.
#[test]
fn example_configurations_match_the_schema() {
    let root = Path::new(ROOT);
    let mut checked = Vec::new();
    for file in documents(root) {
        // The generated reference shows wrong values on purpose (what check-config says
        // about each); the reference test checks it against the schema.
        if file.ends_with("docs/configuration.md") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for (i, block) in configurations(&text).into_iter().enumerate() {
            let shown = file.strip_prefix(root).unwrap().display().to_string();
            if let Err(e) = idemgate::Config::from_toml(&block) {
                panic!("{shown}, configuration {}: {e}\n{block}", i + 1);
            }
            checked.push(shown);
        }
    }
    for expected in ["README.md", "docs/operations.md"] {
        assert!(
            checked.iter().any(|c| c == expected),
            "no example configuration found in {expected}: {checked:?}"
        );
    }
}

/// A configuration with a misspelt setting is refused, so the check above can fail.
#[test]
fn a_misspelt_example_is_refused() {
    let text = "```toml\n[redis]\nurll = \"redis://x\"\n\n[[routes]]\nname = \"a\"\n\
                path_prefix = \"/\"\nupstream = \"http://127.0.0.1:1\"\n```\n";
    let blocks = configurations(text);
    assert_eq!(blocks.len(), 1);
    assert!(idemgate::Config::from_toml(&blocks[0]).is_err());
    let fixed = blocks[0].replace("urll", "url");
    assert!(idemgate::Config::from_toml(&fixed).is_ok());
}

/// The doc comments of `source` (`///`, `//!`) that carry a measured ratio (`1.02x`):
/// the configuration reference is generated from those of `src/config/`, and a
/// measurement lives in BENCHMARKS.md with how to reproduce it, where the next run
/// replaces it, not in the code, where nothing does.
fn measured_ratios(source: &str) -> Vec<String> {
    let ratio = |w: &str| {
        let w = w.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '.');
        (w.strip_suffix('x')).is_some_and(|n| {
            n.starts_with(|c: char| c.is_ascii_digit())
                && n.chars().all(|c| c.is_ascii_digit() || c == '.')
        })
    };
    (source.lines().map(str::trim))
        .filter(|l| l.starts_with("///") || l.starts_with("//!"))
        .filter(|l| l.split_whitespace().any(ratio))
        .map(str::to_string)
        .collect()
}

#[test]
fn no_doc_comment_carries_a_measured_ratio() {
    let root = Path::new(ROOT);
    let mut found = Vec::new();
    let files = [
        walk(&root.join("src"), &["rs"]),
        walk(&root.join("xtask/src"), &["rs"]),
    ];
    for file in files.concat() {
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file.strip_prefix(root).unwrap().display().to_string();
        found.extend(
            measured_ratios(&text)
                .into_iter()
                .map(|l| format!("{shown}: {l}")),
        );
    }
    assert!(
        found.is_empty(),
        "measured ratios in doc comments (move them to BENCHMARKS.md and link):\n{}",
        found.join("\n")
    );
}

/// A ratio in a doc comment is found; one in code, a multiplication (`3 x`) and a
/// hexadecimal literal are not.
#[test]
fn the_ratio_check_finds_a_ratio_in_a_doc_comment() {
    let source = "/// ran at 1.02x the req/s (0.76x to 0.88x).\n//! 2x faster\n\
                  /// at least 3 x `command_timeout`, mask 0x1f\nlet r = 1.5x;\n";
    assert_eq!(
        measured_ratios(source),
        [
            "/// ran at 1.02x the req/s (0.76x to 0.88x).",
            "//! 2x faster"
        ]
    );
}
