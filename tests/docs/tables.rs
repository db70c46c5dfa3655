//! Tables kept whole by the code they describe: every alert has a runbook entry, every
//! metric a row in docs/metrics.md, every problem code a row in docs/http.md's errors
//! and a gRPC status in its gRPC table.

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

/// The problem codes `code_for` in src/grpc.rs maps, each with the gRPC status of its
/// arm (`GrpcCode::FailedPrecondition` as `FAILED_PRECONDITION`), and the status of
/// its fallback arm (`_ => ...`), if any.
fn grpc_mapping(source: &str) -> (Vec<(String, String)>, Option<String>) {
    let screaming = |camel: &str| {
        let mut out = String::new();
        for (i, c) in camel.chars().enumerate() {
            if c.is_ascii_uppercase() && i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_uppercase());
        }
        out
    };
    let Some(start) = source.find("fn code_for(") else {
        return (Vec::new(), None);
    };
    let body = &source[start..];
    let body = &body[..body.find("\n}").unwrap_or(body.len())];
    let (mut mapped, mut fallback, mut pending) = (Vec::new(), None, Vec::new());
    for line in body.lines() {
        pending.extend((line.split('"').skip(1).step_by(2)).map(str::to_string));
        let Some((_, status)) = line.split_once("=> GrpcCode::") else {
            continue;
        };
        let status = screaming(status.trim_end_matches([',', ' ']));
        if line.trim_start().starts_with("_ =>") {
            fallback = Some(status.clone());
        }
        mapped.extend(pending.drain(..).map(|code| (code, status.clone())));
    }
    (mapped, fallback)
}

/// The rows of the table headed `| problem `code` | gRPC status |` in docs/http.md:
/// each code of a row's first cell (its code spans that are snake-case words) with the
/// first code span of its second.
fn grpc_rows(doc: &str) -> Vec<(String, String)> {
    let Some(at) = doc.find("| problem `code` | gRPC status |") else {
        return Vec::new();
    };
    let rows = doc[at..].lines().skip(2).take_while(|l| l.starts_with('|'));
    let mut out = Vec::new();
    for row in rows {
        let cells: Vec<&str> = row.split('|').collect();
        let (Some(codes), Some(status)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let status = status.split('`').nth(1).unwrap_or("").to_string();
        let snake =
            |w: &&str| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
        for code in codes.split('`').skip(1).step_by(2).filter(snake) {
            out.push((code.to_string(), status.clone()));
        }
    }
    out
}

/// What is wrong with docs/http.md's gRPC table (`doc`) against `code_for` in
/// src/grpc.rs (`source`) and the problem codes the gateway answers with (`codes`):
/// a code `code_for` maps, or any problem code, without a row or with another status
/// than the one answered (the fallback's, for a code `code_for` does not name), and a
/// row for a code nothing answers.
fn grpc_table_problems(source: &str, doc: &str, codes: &[String]) -> Vec<String> {
    let (mapped, fallback) = grpc_mapping(source);
    let rows = grpc_rows(doc);
    let mut expected = mapped.clone();
    for code in codes {
        if !mapped.iter().any(|(c, _)| c == code) {
            let status = fallback.clone().unwrap_or_else(|| "no status".into());
            expected.push((code.clone(), status));
        }
    }
    let mut problems = Vec::new();
    for (code, status) in &expected {
        match rows.iter().find(|(c, _)| c == code) {
            None => problems.push(format!(
                "{code}: answered {status}, no row in the gRPC table"
            )),
            Some((_, s)) if s != status => problems.push(format!(
                "{code}: the gRPC table says {s}, answered {status}"
            )),
            Some(_) => {}
        }
    }
    for (code, _) in &rows {
        if !expected.iter().any(|(c, _)| c == code) {
            problems.push(format!(
                "{code}: a row in the gRPC table, but no such problem"
            ));
        }
    }
    problems
}

/// Every problem code the gateway answers a gRPC call with has the row of its status in
/// the gRPC table of docs/http.md (src/grpc.rs's own test checks the other way: each
/// row's status is what `code_for` answers).
#[test]
fn the_grpc_table_has_every_problem_with_its_status() {
    let root = Path::new(ROOT);
    let source = std::fs::read_to_string(root.join("src/grpc.rs")).unwrap();
    let doc = std::fs::read_to_string(root.join("docs/http.md")).unwrap();
    let codes = problem_codes(&std::fs::read_to_string(root.join("src/problem.rs")).unwrap());
    let (mapped, fallback) = grpc_mapping(&source);
    assert!(
        mapped.len() >= 15 && fallback.is_some() && codes.len() >= 15,
        "code_for not read from src/grpc.rs: {mapped:?} {fallback:?}; codes {codes:?}"
    );
    let problems = grpc_table_problems(&source, &doc, &codes);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A missing row, a row with the wrong status, a code left to the fallback without its
/// row, and a row for no problem are all found.
#[test]
fn the_grpc_table_check_finds_a_missing_row_and_a_wrong_status() {
    let source = "pub fn code_for(problem: &Problem) -> GrpcCode {\n    match problem.code {\n\
                  \x20       \"key_reused\" => GrpcCode::FailedPrecondition,\n\
                  \x20       \"in_flight\"\n        | \"superseded\" => GrpcCode::Aborted,\n\
                  \x20       \"timeout\" => GrpcCode::DeadlineExceeded,\n\
                  \x20       _ => GrpcCode::Internal,\n    }\n}\n";
    let doc = "| problem `code` | gRPC status |\n|---|---|\n\
               | `key_reused` | `FAILED_PRECONDITION`: why |\n\
               | `in_flight`, `superseded` (or `wait = true`) | `ABORTED` |\n\
               | `gone` | `INTERNAL` |\n";
    let codes = ["internal_error".to_string(), "in_flight".to_string()];
    assert!(grpc_table_problems(source, doc, &codes).len() == 3);
    let wrong = doc.replace("| `ABORTED` |", "| `UNAVAILABLE` |");
    assert_eq!(
        grpc_table_problems(source, &wrong, &codes),
        [
            "in_flight: the gRPC table says UNAVAILABLE, answered ABORTED",
            "superseded: the gRPC table says UNAVAILABLE, answered ABORTED",
            "timeout: answered DEADLINE_EXCEEDED, no row in the gRPC table",
            "internal_error: answered INTERNAL, no row in the gRPC table",
            "gone: a row in the gRPC table, but no such problem",
        ]
    );
    let fixed =
        format!("{doc}| `timeout` | `DEADLINE_EXCEEDED` |\n| `internal_error` | `INTERNAL` |\n")
            .replace("| `gone` | `INTERNAL` |\n", "");
    assert!(grpc_table_problems(source, &fixed, &codes).is_empty());
}
