//! The size rules, for the gateway, its tests, the launcher and the developer tasks: a
//! file of at most 400 lines (tests included), and a function of at most 80 lines in
//! `src/` and `xtask/src/`, 100 in tests, the launcher and the examples (a scenario
//! reads top to bottom). Files and functions that were over when the rules came are
//! listed with the size they had: they may shrink, never grow, and leave the list once
//! they are within the rule (the test says so).

use std::path::{Path, PathBuf};

use super::ROOT;

/// The most lines a file may have.
const LONGEST_FILE: usize = 400;

/// The longest a function may be, in lines from `fn` to its closing brace: in the
/// gateway and the developer tasks, and elsewhere (tests, `fleet/`).
const LONGEST_FUNCTION: usize = 80;
const LONGEST_TEST_FUNCTION: usize = 100;

/// Where the rules apply (`.rs` files, folders walked).
const CHECKED: &[&str] = &["src", "xtask/src", "fleet", "tests"];

/// Folders whose functions get [`LONGEST_FUNCTION`]; the rest get [`LONGEST_TEST_FUNCTION`].
const STRICT: &[&str] = &["src/", "xtask/src/"];

/// Files over [`LONGEST_FILE`] when the rule came, with their size then.
const LONG_FILES: &[(&str, usize)] = &[];

/// Functions over their limit when the rule came (file, function, lines then).
const LONG_FUNCTIONS: &[(&str, &str, usize)] = &[];

/// Every checked `.rs` file, as (path from the root, text).
fn files() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut dirs: Vec<PathBuf> = CHECKED.iter().map(|d| Path::new(ROOT).join(d)).collect();
    while let Some(dir) = dirs.pop() {
        for file in std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.path()) {
            if file.is_dir() {
                if !file.ends_with("target") {
                    dirs.push(file);
                }
            } else if file.extension().is_some_and(|e| e == "rs") {
                let rel = file.strip_prefix(ROOT).unwrap().to_string_lossy();
                let rel = rel.into_owned();
                if CHECKED.iter().any(|c| rel.starts_with(c)) {
                    out.push((rel, std::fs::read_to_string(&file).unwrap()));
                }
            }
        }
    }
    out.sort();
    out
}

fn function_limit(file: &str) -> usize {
    if STRICT.iter().any(|s| file.starts_with(s)) {
        LONGEST_FUNCTION
    } else {
        LONGEST_TEST_FUNCTION
    }
}

/// What breaks the rules in `files`, against the lists of what was over when they came.
fn oversized(
    files: &[(String, String)],
    long_files: &[(&str, usize)],
    long_functions: &[(&str, &str, usize)],
) -> Vec<String> {
    let mut wrong = Vec::new();
    for (file, text) in files {
        let lines = text.lines().count();
        match long_files.iter().find(|(f, _)| f == file) {
            Some(&(_, then)) if lines > then => {
                wrong.push(format!("{file}: {lines} lines, more than its {then} when the {LONGEST_FILE}-line rule came"))
            }
            Some(_) if lines <= LONGEST_FILE => {
                wrong.push(format!("{file}: {lines} lines, within the rule now: take it off LONG_FILES"))
            }
            None if lines > LONGEST_FILE => wrong.push(format!("{file}: {lines} lines, over {LONGEST_FILE}")),
            _ => {}
        }
        let limit = function_limit(file);
        for (name, lines) in long_functions_in(text, limit) {
            match long_functions
                .iter()
                .find(|(f, n, _)| f == file && *n == name)
            {
                Some(&(_, _, then)) if lines > then => wrong.push(format!(
                    "{file}: {name} has {lines} lines, more than its {then} when the rule came"
                )),
                Some(_) => {}
                None => wrong.push(format!("{file}: {name} has {lines} lines, over {limit}")),
            }
        }
    }
    for &(file, name, _) in long_functions {
        let text = files
            .iter()
            .find(|(f, _)| f == file)
            .map(|(_, t)| t.as_str());
        let still = text.is_some_and(|t| {
            long_functions_in(t, function_limit(file))
                .iter()
                .any(|(n, _)| n == name)
        });
        if !still {
            wrong.push(format!(
                "{file}: {name} is within the rule now (or gone): take it off LONG_FUNCTIONS"
            ));
        }
    }
    for &(file, _) in long_files {
        if !files.iter().any(|(f, _)| f == file) {
            wrong.push(format!("{file} is gone: take it off LONG_FILES"));
        }
    }
    wrong
}

/// Functions longer than `limit` lines in `text`, as `(name, lines)`.
pub fn long_functions_in(text: &str, limit: usize) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut long = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let Some((indent, name)) = function_start(line) else {
            continue;
        };
        let Some(open) = (start..lines.len()).find(|&k| {
            let l = lines[k].trim_end();
            l.ends_with('{') || l.ends_with(';')
        }) else {
            continue;
        };
        if !lines[open].trim_end().ends_with('{') {
            continue; // a declaration without a body
        }
        let close = format!("{indent}}}");
        let end = (open..lines.len()).find(|&k| lines[k] == close);
        let length = end.map_or(lines.len() - start, |end| end - start + 1);
        if length > limit {
            long.push((name, length));
        }
    }
    long
}

/// `(indentation, name)` when `line` starts a function.
fn function_start(line: &str) -> Option<(&str, String)> {
    let code = line.trim_start();
    let indent = &line[..line.len() - code.len()];
    let mut words = code.split_whitespace().peekable();
    while let Some(&word) = words.peek() {
        let qualifier = word.starts_with("pub") || matches!(word, "async" | "const" | "unsafe");
        if !qualifier {
            break;
        }
        words.next();
    }
    if words.next()? != "fn" {
        return None;
    }
    let name: String = (words.next()?.chars())
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    Some((indent, name))
}

#[test]
fn files_and_functions_keep_their_size_rules() {
    let wrong = oversized(&files(), LONG_FILES, LONG_FUNCTIONS);
    assert!(
        wrong.is_empty(),
        "size rules ({}):\n{}",
        module_path!(),
        wrong.join("\n")
    );
}

// The checker itself, on made-up files: each rule fails when broken.

fn made_up(name: &str, lines: usize, function: usize) -> (String, String) {
    let body = "    let _ = 1;\n".repeat(function.saturating_sub(2));
    let text = format!(
        "fn f() {{\n{body}}}\n{}",
        "\n".repeat(lines.saturating_sub(function))
    );
    (name.to_string(), text)
}

#[test]
fn a_long_function_is_reported() {
    let body = "    let _ = 1;\n".repeat(81);
    let text = format!("pub(crate) async fn long() {{\n{body}}}\nfn short() {{\n}}\n");
    assert_eq!(long_functions_in(&text, 80), [("long".to_string(), 83)]);
}

#[test]
fn each_size_rule_is_reported_when_broken() {
    let over = |files: &[(String, String)], lf: &[(&str, usize)], lfn: &[(&str, &str, usize)]| {
        oversized(files, lf, lfn)
    };
    // Within every rule; a test function may be longer than a gateway function.
    assert!(over(
        &[
            made_up("src/a.rs", 400, 80),
            made_up("tests/a.rs", 300, 100)
        ],
        &[],
        &[]
    )
    .is_empty());
    // A new file or function over the rule.
    assert_eq!(over(&[made_up("tests/a.rs", 401, 10)], &[], &[]).len(), 1);
    assert_eq!(over(&[made_up("src/a.rs", 100, 81)], &[], &[]).len(), 1);
    assert_eq!(over(&[made_up("tests/a.rs", 200, 101)], &[], &[]).len(), 1);
    // A listed one that grew, and one that is within the rule now.
    assert_eq!(
        over(
            &[made_up("tests/a.rs", 451, 10)],
            &[("tests/a.rs", 450)],
            &[]
        )
        .len(),
        1
    );
    assert_eq!(
        over(
            &[made_up("tests/a.rs", 399, 10)],
            &[("tests/a.rs", 450)],
            &[]
        )
        .len(),
        1
    );
    assert!(over(
        &[made_up("tests/a.rs", 449, 10)],
        &[("tests/a.rs", 450)],
        &[]
    )
    .is_empty());
    assert_eq!(
        over(
            &[made_up("tests/a.rs", 200, 121)],
            &[],
            &[("tests/a.rs", "f", 120)]
        )
        .len(),
        1
    );
    assert_eq!(
        over(
            &[made_up("tests/a.rs", 200, 90)],
            &[],
            &[("tests/a.rs", "f", 120)]
        )
        .len(),
        1
    );
    assert!(over(
        &[made_up("tests/a.rs", 200, 110)],
        &[],
        &[("tests/a.rs", "f", 120)]
    )
    .is_empty());
    // A listed file that is gone.
    assert_eq!(over(&[], &[("tests/gone.rs", 450)], &[]).len(), 1);
}
