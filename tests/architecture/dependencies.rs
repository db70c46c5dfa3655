//! Dependencies: every module of `src/` uses only the modules its line of
//! ARCHITECTURE.md's "Dependencies" allows, and no two files import each other (in the
//! developer tasks of `xtask/src/` too).
//!
//! The checker reads the source as text: comments and string literals are blanked, then
//! every `crate::…` and `super::…` path (brace groups expanded) is a use of the module
//! it names. A use of a folder's own `mod.rs` from inside the folder (its error type,
//! say) is always allowed, and so is a `mod.rs` re-exporting its own files. Reading
//! the source is [`super::source`]'s.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::source::{code_only, references, ModPath};
use super::ROOT;

/// The source folders of the crates checked for files importing each other: the
/// gateway and the developer tasks (`cargo xtask`). The Dependencies rules are the
/// gateway's only.
const SOURCES: &[&str] = &["src", "xtask/src"];

/// One line of ARCHITECTURE.md's "Dependencies": `subject` may use `allowed`.
#[derive(Debug)]
struct Rule {
    subject: ModPath,
    allowed: Vec<ModPath>,
}

fn path(text: &str) -> ModPath {
    text.split("::").map(str::to_owned).collect()
}

/// The rules: lines `` - `a::b` → `x`, `y::z` `` (or `→ nothing`) under the heading
/// `## Dependencies`.
fn rules(architecture: &str) -> Vec<Rule> {
    let mut rules = Vec::new();
    let mut inside = false;
    for line in architecture.lines() {
        if line.starts_with("## ") {
            inside = line.trim() == "## Dependencies";
            continue;
        }
        let Some(rest) = line.strip_prefix("- `").filter(|_| inside) else {
            continue;
        };
        let Some((subject, allowed)) = rest.split_once("` →") else {
            continue;
        };
        let allowed = (allowed.split(','))
            .filter_map(|a| a.trim().strip_prefix('`')?.split('`').next())
            .map(path)
            .collect();
        rules.push(Rule {
            subject: path(subject),
            allowed,
        });
    }
    rules
}

/// Every module file of the library (not `main.rs` or `src/bin/`), by module path, with
/// its comments and string literals blanked.
fn modules(src: &Path) -> BTreeMap<ModPath, String> {
    let mut found = BTreeMap::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let file = entry.path();
            let rel = file
                .strip_prefix(src)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if file.is_dir() {
                if rel != "bin" {
                    dirs.push(file);
                }
                continue;
            }
            let Some(stem) = rel.strip_suffix(".rs") else {
                continue;
            };
            if stem == "main" {
                continue;
            }
            let mut module: ModPath = stem.split('/').map(str::to_owned).collect();
            if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                module.pop();
            }
            found.insert(module, code_only(&std::fs::read_to_string(&file).unwrap()));
        }
    }
    found
}

/// The module file `reference` lands in: its longest prefix that is a module.
fn resolve<'a>(modules: &'a BTreeMap<ModPath, String>, reference: &[String]) -> &'a ModPath {
    (0..=reference.len())
        .rev()
        .find_map(|n| modules.get_key_value(&reference[..n]).map(|(k, _)| k))
        .expect("the crate root is a module")
}

/// Every use against the rules, as `module uses path (allowed: ...)`.
fn forbidden_uses(rules: &[Rule], modules: &BTreeMap<ModPath, String>) -> Vec<String> {
    let mut wrong = BTreeSet::new();
    for (module, code) in modules {
        let Some(rule) = (rules.iter())
            .filter(|r| module.starts_with(&r.subject))
            .max_by_key(|r| r.subject.len())
        else {
            continue;
        };
        for reference in references(module, code) {
            let target = resolve(modules, &reference);
            let inside = reference.starts_with(&rule.subject);
            let ancestor = !target.is_empty() && module.starts_with(target);
            let allowed = rule.allowed.iter().any(|a| reference.starts_with(a));
            if !(inside || ancestor || allowed || target.is_empty()) {
                wrong.insert(format!(
                    "{} uses {} (its rule allows: {})",
                    module.join("::"),
                    reference.join("::"),
                    describe(&rule.allowed)
                ));
            }
        }
    }
    wrong.into_iter().collect()
}

fn describe(allowed: &[ModPath]) -> String {
    if allowed.is_empty() {
        return "nothing".into();
    }
    allowed
        .iter()
        .map(|a| a.join("::"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Pairs of files that use each other, apart from a folder's `mod.rs` and its own files.
fn mutual_imports(modules: &BTreeMap<ModPath, String>) -> Vec<String> {
    let mut edges: BTreeSet<(ModPath, ModPath)> = BTreeSet::new();
    for (module, code) in modules {
        for reference in references(module, code) {
            let target = resolve(modules, &reference).clone();
            if &target != module {
                edges.insert((module.clone(), target));
            }
        }
    }
    let related = |a: &ModPath, b: &ModPath| a.starts_with(b) || b.starts_with(a);
    (edges.iter())
        .filter(|(a, b)| a < b && !related(a, b) && edges.contains(&(b.clone(), a.clone())))
        .map(|(a, b)| format!("{} <-> {}", a.join("::"), b.join("::")))
        .collect()
}

fn architecture() -> String {
    std::fs::read_to_string(Path::new(ROOT).join("ARCHITECTURE.md")).unwrap()
}

#[test]
fn every_top_level_module_has_a_dependency_rule() {
    let rules = rules(&architecture());
    let modules = modules(&Path::new(ROOT).join("src"));
    let tops: BTreeSet<&String> = modules.keys().filter_map(|m| m.first()).collect();
    let missing: Vec<&&String> = (tops.iter())
        .filter(|top| !rules.iter().any(|r| r.subject == [top.to_string()]))
        .collect();
    assert!(
        missing.is_empty(),
        "modules without a line in ARCHITECTURE.md's Dependencies: {missing:?}"
    );
}

/// A cycle among the top-level modules the rules allow, if any (`a → b → a`).
fn cycle(rules: &[Rule]) -> Option<Vec<String>> {
    let next = |m: &str| -> Vec<String> {
        (rules.iter())
            .filter(|r| r.subject.len() == 1 && r.subject[0] == m)
            .flat_map(|r| r.allowed.iter().map(|a| a[0].clone()))
            .filter(|a| a != m)
            .collect()
    };
    fn visit(m: &str, trail: &mut Vec<String>, next: &dyn Fn(&str) -> Vec<String>) -> bool {
        if trail.iter().any(|t| t == m) {
            trail.push(m.to_owned());
            return true;
        }
        trail.push(m.to_owned());
        if next(m).iter().any(|n| visit(n, trail, next)) {
            return true;
        }
        trail.pop();
        false
    }
    rules.iter().find_map(|r| {
        let mut trail = Vec::new();
        visit(&r.subject[0], &mut trail, &next).then_some(trail)
    })
}

#[test]
fn the_allowed_directions_have_no_cycle() {
    let rules = rules(&architecture());
    assert_eq!(
        cycle(&rules),
        None,
        "ARCHITECTURE.md's Dependencies allow a cycle"
    );
}

#[test]
fn modules_use_only_what_architecture_md_allows() {
    let rules = rules(&architecture());
    let wrong = forbidden_uses(&rules, &modules(&Path::new(ROOT).join("src")));
    assert!(
        wrong.is_empty(),
        "uses against ARCHITECTURE.md's Dependencies:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_two_files_import_each_other() {
    let mutual: Vec<String> = (SOURCES.iter())
        .flat_map(|src| mutual_imports(&modules(&Path::new(ROOT).join(src))))
        .collect();
    assert!(
        mutual.is_empty(),
        "files that import each other:\n{}",
        mutual.join("\n")
    );
}

// The checker itself, on made-up sources: each rule fails when broken.

fn made_up(files: &[(&str, &str)]) -> BTreeMap<ModPath, String> {
    (files.iter())
        .map(|(m, code)| {
            let module = if m.is_empty() { vec![] } else { path(m) };
            (module, code_only(code))
        })
        .collect()
}

const MADE_UP_RULES: &str = "## Dependencies\n\
    - `config` → nothing\n\
    - `store` → `config`, `idempotency::key`\n\
    - `idempotency` → `config`\n\
    ## Next\n";

#[test]
fn a_forbidden_use_is_reported() {
    let rules = rules(MADE_UP_RULES);
    let modules = made_up(&[
        ("", "pub mod config; pub mod store;"),
        (
            "config",
            "use crate::store::StoreError; // crate::http in a comment",
        ),
        (
            "store",
            "use crate::{config::Config, idempotency::{key::Key, scope}};",
        ),
        (
            "store::redis",
            "use super::StoreError; let s = \"crate::http\";",
        ),
        ("idempotency", ""),
        ("idempotency::key", ""),
        ("idempotency::scope", ""),
    ]);
    assert_eq!(
        forbidden_uses(&rules, &modules),
        [
            "config uses store::StoreError (its rule allows: nothing)",
            "store uses idempotency::scope (its rule allows: config, idempotency::key)",
        ]
    );
}

#[test]
fn a_cycle_in_the_rules_is_reported() {
    let looped = MADE_UP_RULES.replace("`config` → nothing", "`config` → `store`");
    assert_eq!(
        cycle(&rules(&looped)),
        Some(vec!["config".into(), "store".into(), "config".into()])
    );
    assert_eq!(cycle(&rules(MADE_UP_RULES)), None);
}

#[test]
fn files_importing_each_other_are_reported() {
    let modules = made_up(&[
        ("", ""),
        (
            "store",
            "pub use self::lease::Lease; pub struct StoreError;",
        ),
        (
            "store::lease",
            "use super::StoreError; use super::heartbeat::beat;",
        ),
        ("store::heartbeat", "use crate::store::lease::Lease;"),
    ]);
    assert_eq!(
        mutual_imports(&modules),
        ["store::heartbeat <-> store::lease"]
    );
}
