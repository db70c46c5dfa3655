//! Checks on the documentation, with no server: every relative Markdown link of the
//! documents resolves (the file exists; an anchor names a heading of the file), every
//! alert of `deploy/prometheus/alerts.yml` has a runbook entry in `docs/runbooks.md`
//! and a `runbook_url` annotation pointing at it, every metric the gateway exports is
//! in the metrics table of `docs/metrics.md`, and every complete configuration
//! shown in the documents (a TOML block with a `[[routes]]` table) is one the schema
//! accepts.

use std::collections::HashSet;
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
fn anchors(text: &str) -> HashSet<String> {
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

/// Where `text` cites a tracker the repository does not hold ("issue 12", "issues
/// 22-24", "issue #22", "PR #22"): the lines of its prose that do.
fn tracker_citations(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in prose(text) {
        let lower = line.to_lowercase();
        let cites = [
            "issue ",
            "issues ",
            "issue #",
            "issues #",
            "pr #",
            "pull request #",
        ]
        .iter()
        .any(|word| {
            (lower.match_indices(word)).any(|(at, _)| {
                let rest = &lower[at + word.len()..];
                rest.starts_with(|c: char| c.is_ascii_digit())
            })
        });
        if cites {
            found.push(line.trim().to_string());
        }
    }
    found
}

/// No document cites an issue number: a reader of the repository cannot see the
/// tracker, so a document says what changed instead. The changelog's upgrade notes keep
/// theirs.
#[test]
fn no_document_cites_a_tracker_number() {
    let root = Path::new(ROOT);
    let mut found = Vec::new();
    for file in documents(root) {
        if file.ends_with("CHANGELOG.md") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file.strip_prefix(root).unwrap().display().to_string();
        found.extend(
            tracker_citations(&text)
                .into_iter()
                .map(|c| format!("{shown}: {c}")),
        );
    }
    assert!(found.is_empty(), "tracker numbers:\n{}", found.join("\n"));
}

/// The citation check finds "issue 12", "Issues 22-24" and "PR #22", and leaves
/// execution numbers ("exec #454"), anchors and code spans alone.
#[test]
fn the_tracker_check_finds_issue_numbers() {
    let text = "a (issue 12) b\nIssues 22-24 c\nsee PR #22\nexec #454 and [x](#5-a) `issue 9`\n";
    assert_eq!(
        tracker_citations(text),
        ["a (issue 12) b", "Issues 22-24 c", "see PR #22"]
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

/// `(alert, runbook_url)` of every rule in alerts.yml.
fn alerts(yml: &str) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    for line in yml.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix("- alert: ") {
            out.push((name.trim().to_string(), None));
        } else if let Some(url) = line.strip_prefix("runbook_url: ") {
            if let Some(last) = out.last_mut() {
                last.1 = Some(url.trim().trim_matches('"').to_string());
            }
        }
    }
    out
}

/// What is wrong with the runbooks of `yml`'s alerts in `runbooks` (docs/runbooks.md).
fn runbook_problems(yml: &str, runbooks: &str) -> Vec<String> {
    let entries = anchors(runbooks);
    let mut problems = Vec::new();
    for (alert, url) in alerts(yml) {
        let anchor = alert.to_lowercase();
        if !entries.contains(&anchor) {
            problems.push(format!(
                "{alert}: no `## {alert}` entry in docs/runbooks.md"
            ));
        }
        let expected = format!("docs/runbooks.md#{anchor}");
        if url.as_deref() != Some(expected.as_str()) {
            problems.push(format!(
                "{alert}: runbook_url is {url:?}, expected \"{expected}\""
            ));
        }
    }
    problems
}

#[test]
fn every_alert_has_a_runbook_entry_and_annotation() {
    let root = Path::new(ROOT);
    let yml = std::fs::read_to_string(root.join("deploy/prometheus/alerts.yml")).unwrap();
    let runbooks = std::fs::read_to_string(root.join("docs/runbooks.md")).unwrap();
    assert!(
        alerts(&yml).len() >= 9,
        "alerts.yml lost its alerts? {:?}",
        alerts(&yml)
    );
    let problems = runbook_problems(&yml, &runbooks);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// An alert without an entry, and one without its annotation, are both found.
#[test]
fn an_alert_without_a_runbook_is_found() {
    let yml = "      - alert: IdemgateA\n        annotations:\n          runbook_url: \"docs/runbooks.md#idemgatea\"\n\
               \x20     - alert: IdemgateB\n        annotations:\n          summary: x\n";
    let runbooks = "# Runbooks\n\n## IdemgateA\n";
    assert_eq!(
        runbook_problems(yml, runbooks),
        [
            "IdemgateB: no `## IdemgateB` entry in docs/runbooks.md",
            "IdemgateB: runbook_url is None, expected \"docs/runbooks.md#idemgateb\""
        ]
    );
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

/// The quoted `idemgate_*` names of a source file.
fn metric_names(source: &str) -> Vec<String> {
    let mut names: Vec<String> = (source.split('"').skip(1).step_by(2))
        .filter(|s| {
            s.starts_with("idemgate_") && s.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        })
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The names `extract` finds in `sources` (at least `least` of them) that have no row
/// (`| `name` |`) in the doc at `doc`.
fn without_a_row(
    doc: &str,
    sources: &[&str],
    extract: fn(&str) -> Vec<String>,
    least: usize,
) -> Vec<String> {
    let root = Path::new(ROOT);
    let text = std::fs::read_to_string(root.join(doc)).unwrap();
    let mut names = Vec::new();
    for file in sources {
        names.extend(extract(&std::fs::read_to_string(root.join(file)).unwrap()));
    }
    assert!(
        names.len() >= least,
        "names not found in {sources:?}: {names:?}"
    );
    (names.into_iter())
        .filter(|n| !text.contains(&format!("| `{n}` |")))
        .collect()
}

/// Every metric name of `src/metrics/` (the contract with dashboards and alerts) and
/// of the worker listeners has a row in the metrics table of docs/metrics.md.
#[test]
fn every_metric_is_documented() {
    let mut sources: Vec<String> = (std::fs::read_dir(Path::new(ROOT).join("src/metrics")))
        .unwrap()
        .flatten()
        .map(|e| format!("src/metrics/{}", e.file_name().to_string_lossy()))
        .filter(|f| f.ends_with(".rs"))
        .collect();
    sources.push("src/server/workers.rs".into());
    let sources: Vec<&str> = sources.iter().map(String::as_str).collect();
    let missing = without_a_row("docs/metrics.md", &sources, metric_names, 20);
    assert!(
        missing.is_empty(),
        "metrics without a row in docs/metrics.md: {missing:?}"
    );
}

/// The problem codes of a source file: the quoted name after a `StatusCode::...,` line
/// (`Problem::new(status, code, ...)`), or a match arm that yields a code.
fn problem_codes(source: &str) -> Vec<String> {
    let snake = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c == '_');
    let mut codes = Vec::new();
    let mut after_status = false;
    for line in source.lines().map(str::trim) {
        let quoted = line.split('"').nth(1).filter(|q| snake(q));
        let arm = line.contains("=> \"") && line.ends_with("\",");
        if let Some(code) = quoted.filter(|_| after_status && line.starts_with('"') || arm) {
            codes.push(code.to_string());
        }
        after_status = line.starts_with("StatusCode::") && line.ends_with(',');
    }
    codes.sort();
    codes.dedup();
    codes
}

/// Every problem code the gateway and its admin API answer with has a row in the
/// tables of docs/http.md.
#[test]
fn every_problem_code_is_documented() {
    let sources = ["src/problem.rs", "src/http/admin_keys.rs"];
    let missing = without_a_row("docs/http.md", &sources, problem_codes, 20);
    assert!(
        missing.is_empty(),
        "problem codes without a row in docs/http.md (## Errors): {missing:?}"
    );
}
