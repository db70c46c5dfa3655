//! Defaults written by hand agree with the schema's ([`Config::default`]): a row of a
//! table whose second column is "default" (`| \`server.write_timeout\` | 30s | ...`),
//! and every setting of the complete example in docs/operations.md, where a value is the
//! default unless its comment says `(default ...)`. The generated reference
//! (docs/configuration.md) is the schema itself and is not checked here.

use std::path::Path;

use figment::providers::{Format, Serialized, Toml};
use figment::Figment;
use idemgate::config::{Config, PostgresConfig};
use serde_json::Value;

use super::{documents, ROOT};

/// Every default, with `[postgres]` present, as serialised.
fn base() -> Config {
    Config {
        postgres: Some(PostgresConfig::default()),
        ..Config::default()
    }
}

fn lookup(config: &Config, key: &str) -> Option<Value> {
    let mut value = serde_json::to_value(config).expect("the configuration serialises");
    for part in key.split('.') {
        value = value.get(part)?.clone();
    }
    (!value.is_null()).then_some(value)
}

/// What `key = value` reads as (TOML text), or why it does not read.
fn read_as(key: &str, value: &str) -> Result<Option<Value>, String> {
    let (section, name) = key.rsplit_once('.').ok_or("not a section's setting")?;
    let text = format!("[{section}]\n{name} = {value}\n");
    let config: Config = Figment::from(Serialized::defaults(base()))
        .merge(Toml::string(&text))
        .extract()
        .map_err(|e| e.to_string())?;
    Ok(lookup(&config, key))
}

/// A table cell's default as TOML: `1024`, `true` and `[..]` as they are, `none` (or
/// words: "system roots") as no value, anything else (`30s`, `256MiB`) as a string.
fn cell_as_toml(cell: &str) -> Option<String> {
    let cell = cell.trim().trim_matches('`');
    let literal = cell.parse::<f64>().is_ok()
        || matches!(cell, "true" | "false")
        || cell.starts_with(['[', '"']);
    if literal {
        Some(cell.to_string())
    } else if cell == "none" || cell.contains(' ') {
        None
    } else {
        Some(format!("\"{cell}\""))
    }
}

/// Disagreements of one table row (`key`, its default cell) with the schema.
fn row_problem(key: &str, cell: &str) -> Option<String> {
    let default = lookup(&base(), key);
    let written = match cell_as_toml(cell) {
        None => None,
        Some(value) => match read_as(key, &value) {
            Ok(v) => v,
            Err(e) => return Some(format!("`{key}` default `{cell}` does not read: {e}")),
        },
    };
    (written != default).then(|| format!("`{key}`: written {cell}, the default is {default:?}"))
}

/// The Markdown tables of `text` outside fenced code blocks, each as its lines.
fn tables(text: &str) -> Vec<Vec<&str>> {
    let (mut fenced, mut out, mut current) = (false, Vec::new(), Vec::new());
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if !fenced && line.starts_with('|') {
            current.push(line);
        } else if !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
    }
    out.extend((!current.is_empty()).then_some(current));
    out.retain(|t| t.len() > 2);
    out
}

/// Rows `| \`a.b\` | default | ...` of tables whose second header is "default".
fn default_rows(text: &str) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    for table in tables(text) {
        let header = table[0].split('|').map(str::trim).collect::<Vec<_>>();
        if header.get(2).map(|h| h.to_lowercase()) != Some("default".into()) {
            continue;
        }
        for row in &table[2..] {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let key = cells.get(1).map(|k| k.trim_matches('`')).unwrap_or("");
            if key.contains('.') && !key.contains(' ') {
                rows.push((key.to_string(), cells[2].to_string()));
            }
        }
    }
    rows
}

/// The settings of docs/operations.md's complete example: `(key, value, comment)`,
/// route tables left out (they are not defaults).
fn example_settings(operations: &str) -> Vec<(String, String, String)> {
    let start = operations
        .find("A complete example with every section")
        .unwrap();
    let block = operations[start..].split("```toml\n").nth(1).unwrap();
    let block = block.split("\n```").next().unwrap();
    let (mut section, mut out) = (String::new(), Vec::new());
    for line in block.lines() {
        let (code, comment) = line.split_once(" #").unwrap_or((line, ""));
        let code = code.trim();
        if let Some(name) = code.strip_prefix('[') {
            section = name.trim_matches(['[', ']']).to_string();
        } else if let Some((key, value)) = code.split_once(" = ") {
            if !section.starts_with("routes") && !code.starts_with('#') {
                out.push((
                    format!("{section}.{}", key.trim()),
                    value.trim().into(),
                    comment.into(),
                ));
            }
        }
    }
    out
}

fn example_problems(operations: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    for (key, value, comment) in example_settings(operations) {
        let default = lookup(&base(), &key);
        match read_as(&key, &value) {
            Err(e) => wrong.push(format!("`{key} = {value}` does not read: {e}")),
            Ok(read) if comment.contains("(default") && read == default => {
                wrong.push(format!("`{key} = {value}` is the default, its comment says not"))
            }
            Ok(read) if !comment.contains("(default") && read != default => wrong.push(format!(
                "`{key} = {value}` is not the default ({default:?}): say `(default ...)` in its comment"
            )),
            Ok(_) => {}
        }
    }
    wrong
}

#[test]
fn defaults_written_in_the_documents_are_the_schemas() {
    let root = Path::new(ROOT);
    let (mut wrong, mut rows) = (Vec::new(), 0);
    for file in documents(root) {
        let name = file
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if name.contains("history/") || name.ends_with("configuration.md") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for (key, cell) in default_rows(&text) {
            rows += 1;
            wrong.extend(row_problem(&key, &cell).map(|p| format!("{name}: {p}")));
        }
    }
    let operations = std::fs::read_to_string(root.join("docs/operations.md")).unwrap();
    let settings = example_settings(&operations).len();
    assert!(
        rows >= 10 && settings >= 40,
        "{rows} rows, {settings} settings: the parsers lost them"
    );
    wrong.extend(
        example_problems(&operations)
            .into_iter()
            .map(|p| format!("docs/operations.md: {p}")),
    );
    assert!(
        wrong.is_empty(),
        "defaults that disagree with the schema:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_defaults_check_finds_a_wrong_default() {
    assert_eq!(row_problem("server.write_timeout", "30s"), None);
    assert_eq!(row_problem("server.buffer_budget", "256MiB"), None);
    assert_eq!(row_problem("redis.tls.ca_file", "system roots"), None);
    assert!(row_problem("server.write_timeout", "31s").is_some());
    assert!(row_problem("server.max_connections", "none").is_some());
    let example = "A complete example with every section\n\n```toml\n[server]\n\
                   write_timeout = \"30s\"   # fine\nmax_connections = 5  # (default 4096)\n\
                   linger_time = \"1s\"\n[[routes]]\nname = \"x\"\n```\n";
    let wrong = example_problems(example);
    assert_eq!(wrong.len(), 1, "{wrong:?}");
    assert!(wrong[0].contains("linger_time"), "{wrong:?}");
    assert_eq!(
        example_problems(&example.replace("# (default 4096)", "")).len(),
        2
    );
}
