//! No tracker numbers: a reader of the repository cannot see the tracker, so a file says
//! what changed instead of citing an issue. CHANGELOG.md and docs/history/ are the only
//! exceptions (the changelog's upgrade notes and the history keep theirs).

use std::path::{Path, PathBuf};

use super::{documents, prose, walk, ROOT};

/// Whether `line` cites a tracker the repository does not hold ("issue 12", "issues
/// 22-24", "issue #22", "PR #22"), or a numbered list of one ("item 3", "behaviour 2":
/// a task's list, which no reader of the repository has).
fn cites_a_tracker(line: &str) -> bool {
    let lower = line.to_lowercase();
    [
        "issue ",
        "issues ",
        "issue #",
        "issues #",
        "issue-",
        "pr #",
        "pull request #",
        "item ",
        "items ",
        "behaviour ",
        "behaviours ",
        "behavior ",
        "behaviors ",
    ]
    .iter()
    .any(|word| {
        (lower.match_indices(word)).any(|(at, _)| {
            let before = lower[..at].chars().next_back();
            let rest = &lower[at + word.len()..];
            !before.is_some_and(|c| c.is_ascii_alphanumeric())
                && rest.starts_with(|c: char| c.is_ascii_digit())
        })
    })
}

/// The lines of a Markdown text's prose (code spans and blocks left out) that cite a
/// tracker.
fn tracker_citations(text: &str) -> Vec<String> {
    (prose(text).into_iter())
        .filter(|l| cites_a_tracker(l))
        .map(|l| l.trim().to_string())
        .collect()
}

/// The lines of a source file (code, comments and strings alike) that cite a tracker.
fn source_citations(text: &str) -> Vec<String> {
    (text.lines())
        .filter(|l| cites_a_tracker(l))
        .map(|l| l.trim().to_string())
        .collect()
}

/// The files checked: the documents but CHANGELOG.md and docs/history/, every Markdown,
/// source, script, configuration and results text file of the trees below, the
/// Makefile and CI's script.
/// The checker's own planted citations (this module) are left out.
fn checked_files(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = (documents(root).into_iter())
        .filter(|f| !f.ends_with("CHANGELOG.md") && !f.starts_with(root.join("docs/history")))
        .collect();
    let extensions = [
        "md", "rs", "lua", "sql", "toml", "js", "sh", "yml", "yaml", "py", "txt",
    ];
    for dir in [
        "src",
        "lua",
        "migrations",
        "tests",
        "fleet",
        "loadtest",
        "deploy",
        "fuzz",
        "examples",
        "xtask",
    ] {
        files.extend(walk(&root.join(dir), &extensions));
    }
    files.extend(walk(&root.join(".ci"), &["sh", "yml", "yaml"]));
    for file in ["Makefile", ".ci/run", "Cargo.toml", "deny.toml"] {
        files.extend(Some(root.join(file)).filter(|f| f.is_file()));
    }
    files.retain(|f| !f.ends_with("tests/docs/tracker.rs"));
    files
}

#[test]
fn no_file_cites_a_tracker_number() {
    let root = Path::new(ROOT);
    let files = checked_files(root);
    for expected in [
        "README.md",
        "docs/http.md",
        "loadtest/bench/results/claims-write-through-vs-redis.md",
        "loadtest/soak/results/summary.md",
        "lua/claim.lua",
        "src/lib.rs",
        "tests/docs/main.rs",
        "Makefile",
    ] {
        assert!(
            files.iter().any(|f| f.ends_with(expected)),
            "{expected} is not checked"
        );
    }
    let mut found = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let shown = file.strip_prefix(root).unwrap().display().to_string();
        let lines = match file.extension().is_some_and(|e| e == "md") {
            true => tracker_citations(&text),
            false => source_citations(&text),
        };
        found.extend(lines.into_iter().map(|c| format!("{shown}: {c}")));
    }
    assert!(found.is_empty(), "tracker numbers:\n{}", found.join("\n"));
}

/// The citation check finds "issue 12", "Issues 22-24", "PR #22", "issue-15", "Behaviour
/// 2" and "item 3" (in prose, and in a source file's comments and strings), and leaves
/// execution numbers
/// ("exec #454"), anchors, code spans and words that end in "issue" alone.
#[test]
fn the_tracker_check_finds_issue_numbers() {
    let text = "a (issue 12) b\nIssues 22-24 c\nsee PR #22\nexec #454 and [x](#5-a) `issue 9`\n\
                the pre-issue-15 binary\nreissue 3 times\n";
    assert_eq!(
        tracker_citations(text),
        [
            "a (issue 12) b",
            "Issues 22-24 c",
            "see PR #22",
            "the pre-issue-15 binary"
        ]
    );
    // The list references are built, so that no other checker reads them as this file's.
    let (behaviour, item) = (
        format!("//! Behaviour {} of the list", 2),
        format!("// (item {})", 3),
    );
    let source = format!(
        "    /// Fixed for issue 7.\n    let n = 1; // #3 of the list\n\
         # Issue 15: a results header\n{behaviour}\n{item}\n"
    );
    assert_eq!(
        source_citations(&source),
        [
            "/// Fixed for issue 7.",
            "# Issue 15: a results header",
            behaviour.as_str(),
            item.as_str()
        ]
    );
}
