//! Tables kept whole by the code they describe: every alert has a runbook entry, every
//! metric a row in docs/metrics.md, every problem code a row in docs/http.md's errors
//! (its gRPC table is checked against `code_for` itself, in src/grpc.rs), every file of
//! `migrations/` is in the list the binary applies, and every error type of `src/` is
//! named in ARCHITECTURE.md's Errors.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::links::anchors;
use super::{walk, ROOT};

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

/// Every metric name of every source file under `dir` (a metric can be registered
/// anywhere in src/, a listener's next to its accept loop), with the file it is in.
fn metrics_under(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    for file in walk(dir, &["rs"]) {
        let text = std::fs::read_to_string(&file).unwrap();
        found.extend(metric_names(&text).into_iter().map(|n| (n, file.clone())));
    }
    found
}

/// The metrics of `found` without a row (`| `name` |`) in `doc`, as "name (file)".
fn undocumented(found: &[(String, PathBuf)], doc: &str, root: &Path) -> Vec<String> {
    let mut missing: Vec<String> = (found.iter())
        .filter(|(n, _)| !doc.contains(&format!("| `{n}` |")))
        .map(|(n, f)| format!("{n} ({})", f.strip_prefix(root).unwrap_or(f).display()))
        .collect();
    missing.sort();
    missing.dedup();
    missing
}

/// Every metric name in src/ (the contract with dashboards and alerts) has a row in the
/// metrics table of docs/metrics.md.
#[test]
fn every_metric_is_documented() {
    let root = Path::new(ROOT);
    let found = metrics_under(&root.join("src"));
    let files: HashSet<&PathBuf> = found.iter().map(|(_, f)| f).collect();
    assert!(
        found.len() >= 30 && files.len() >= 3,
        "metric names not found in src/: {found:?}"
    );
    let doc = std::fs::read_to_string(root.join("docs/metrics.md")).unwrap();
    let missing = undocumented(&found, &doc, root);
    assert!(
        missing.is_empty(),
        "metrics without a row in docs/metrics.md: {missing:?}"
    );
}

/// A metric registered deep in the tree without a row is found; a documented one, a
/// name with other characters (a format string) and an unquoted name are not.
#[test]
fn the_metrics_check_finds_an_undocumented_metric_in_any_file() {
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("src/server/listen");
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(
        dir.path().join("src/lib.rs"),
        "counter!(\"idemgate_known_total\"); // idemgate_unquoted_total\n",
    )
    .unwrap();
    std::fs::write(
        deep.join("accept.rs"),
        "gauge!(\"idemgate_accept_queue\"); format!(\"idemgate_{x}\");\n",
    )
    .unwrap();
    let found = metrics_under(&dir.path().join("src"));
    let doc = "| metric | what |\n|---|---|\n| `idemgate_known_total` | x |\n";
    assert_eq!(
        undocumented(&found, doc, dir.path()),
        ["idemgate_accept_queue (src/server/listen/accept.rs)"]
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

/// `migrations/` against the list the binary applies (`MIGRATIONS`, store/postgres/
/// migrate.rs): every file listed once, in order, by its number, with its text.
fn migration_problems(files: &[(String, String)], list: &[(i32, &str, &str)]) -> Vec<String> {
    let mut wrong = Vec::new();
    let listed: Vec<&str> = list.iter().map(|m| m.1).collect();
    let found: Vec<&str> = files.iter().map(|f| f.0.as_str()).collect();
    if listed != found {
        wrong.push(format!(
            "migrations/ holds {found:?}, MIGRATIONS lists {listed:?}"
        ));
    }
    for (i, &(version, name, text)) in list.iter().enumerate() {
        let number = name.split('_').next().and_then(|n| n.parse::<i32>().ok());
        if number != Some(version) || version != i as i32 + 1 {
            wrong.push(format!(
                "{name}: listed as version {version}, at place {}",
                i + 1
            ));
        }
        if files.iter().any(|(f, t)| f == name && t != text) {
            wrong.push(format!(
                "{name}: the text compiled in differs from the file"
            ));
        }
    }
    wrong
}

#[test]
fn every_migration_file_is_applied_in_order() {
    let mut files: Vec<(String, String)> = std::fs::read_dir(Path::new(ROOT).join("migrations"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    files.sort();
    let list = idemgate::testing::store::postgres::migrate::MIGRATIONS;
    let wrong = migration_problems(&files, list);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_migrations_check_finds_a_file_left_out_and_a_wrong_number() {
    let files = [
        ("0001_a.sql".to_string(), "A".to_string()),
        ("0002_b.sql".into(), "B".into()),
    ];
    assert!(
        migration_problems(&files, &[(1, "0001_a.sql", "A"), (2, "0002_b.sql", "B")]).is_empty()
    );
    assert_eq!(
        migration_problems(&files, &[(1, "0001_a.sql", "A")]).len(),
        1
    );
    assert_eq!(
        migration_problems(&files[..1], &[(2, "0001_a.sql", "A")]).len(),
        1
    );
    assert_eq!(
        migration_problems(&files[..1], &[(1, "0001_a.sql", "X")]).len(),
        1
    );
}

/// The error types declared in `source` (`#[derive(.., Error)]` before `enum` or
/// `struct`).
fn error_types(source: &str) -> Vec<String> {
    let lines: Vec<&str> = source.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let derives_error = line.trim_start().starts_with("#[derive(")
            && line
                .split(['(', ',', ')'])
                .any(|d| matches!(d.trim(), "Error" | "thiserror::Error"));
        if !derives_error {
            continue;
        }
        let item = lines[i + 1..]
            .iter()
            .find(|l| !l.trim_start().starts_with("#["));
        let words: Vec<&str> = item.map_or(vec![], |l| l.split_whitespace().collect());
        if let Some(at) = words.iter().position(|w| *w == "enum" || *w == "struct") {
            if let Some(name) = words.get(at + 1) {
                found.push(name.trim_end_matches(['{', ';', '(']).to_string());
            }
        }
    }
    found
}

#[test]
fn every_error_type_is_named_in_architecture_md() {
    let root = Path::new(ROOT);
    let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let errors = architecture.split("## Errors").nth(1).unwrap();
    let errors = errors.split("\n## ").next().unwrap();
    let mut missing = Vec::new();
    for file in walk(&root.join("src"), &["rs"]) {
        let source = std::fs::read_to_string(&file).unwrap();
        for name in error_types(&source) {
            let named = [format!("`{name}`"), format!("::{name}`")];
            if !named.iter().any(|n| errors.contains(n.as_str())) {
                missing.push(format!(
                    "{name} ({})",
                    file.strip_prefix(root).unwrap().display()
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "error types ARCHITECTURE.md's Errors does not name: {missing:?}"
    );
}

#[test]
fn the_error_check_finds_a_derived_error() {
    let source = "#[derive(Debug, thiserror::Error)]\n#[non_exhaustive]\npub enum AError {\n}\n\
                  #[derive(Debug, Error)]\npub struct BError;\n#[derive(Debug)]\nstruct C;\n";
    assert_eq!(error_types(source), ["AError", "BError"]);
}
