//! The Markdown of the reference: an introduction, the list of sections, and for each
//! table its settings (type, default, scope, environment variable, values) with their
//! descriptions and what check-config says when one is wrong.

use std::fmt::Write as _;

use super::source::{Def, Defs, Item};
use super::{examples, type_name, variant_name, ReferenceError, Scope, Table};
use idemgate::config::{Config, PostgresConfig, REPLAY_UNSEALED_DEFAULT};

/// The configuration a table's key is written in: `[redis.tls]`.
fn toml_for(key: &str, value: &str) -> String {
    let (table, name) = key.rsplit_once('.').unwrap_or(("", key));
    match table.split_once("[]") {
        Some((array, "")) => format!("[[{array}]]\n{name} = {value}\n"),
        _ => format!("[{}]\n{name} = {value}\n", table.replace("[]", "")),
    }
}

/// What `check-config` says about `config`, without its prefix and origin.
fn message(config: &str) -> Option<String> {
    let text = Config::from_toml(config).err()?.to_string();
    let text = text
        .strip_prefix("invalid configuration: ")
        .unwrap_or(&text);
    Some(
        text.replace(" (from TOML source string)", "")
            .replace('\n', " "),
    )
}

/// The default of every setting, as written in TOML.
fn defaults() -> toml::Value {
    let route =
        "[[routes]]\nname = \"r\"\npath_prefix = \"/\"\nupstream = \"http://127.0.0.1:1\"\n";
    let mut config = Config::from_toml(route).expect("a minimal route loads");
    config.postgres = Some(PostgresConfig::default());
    let mut value = toml::Value::try_from(&config).expect("the configuration serialises");
    let mut encryption = toml::Table::new();
    let unsealed = REPLAY_UNSEALED_DEFAULT;
    encryption.insert("replay_unsealed".into(), toml::Value::Boolean(unsealed));
    value
        .as_table_mut()
        .unwrap()
        .insert("encryption".into(), encryption.into());
    value
}

fn lookup<'a>(value: &'a toml::Value, key: &str) -> Option<&'a toml::Value> {
    key.split('.')
        .try_fold(value, |v, part| match part.strip_suffix("[]") {
            Some(array) => v.get(array)?.get(0),
            None => v.get(part),
        })
}

/// Markdown for a doc comment: intra-doc links as code or plain text.
pub(super) fn markdown(docs: &str) -> String {
    let mut out = String::new();
    let mut rest = docs;
    while let Some(start) = rest.find('[') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let Some(end) = after.find(']') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let (text, tail) = (&after[..end], &after[end + 1..]);
        match tail.strip_prefix('(').and_then(|t| t.split_once(')')) {
            Some((target, tail)) if !target.contains("://") && !target.contains(".md") => {
                out.push_str(text);
                rest = tail;
            }
            _ if text.starts_with('`') && !tail.starts_with('(') => {
                out.push_str(text);
                rest = tail;
            }
            _ => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A table's description without its `` `[name]`: `` lead.
fn table_docs(docs: &str) -> String {
    let docs = markdown(docs);
    let body = match docs.strip_prefix('`').and_then(|d| d.split_once("`: ")) {
        Some((_, body)) => body,
        None => &docs,
    };
    let mut chars = body.chars();
    chars
        .next()
        .map_or(String::new(), |c| c.to_uppercase().chain(chars).collect())
}

fn heading(path: &str) -> String {
    match path {
        "routes[]" => "`[[routes]]`".into(),
        "encryption.keys[]" => "`encryption.keys` (each entry)".into(),
        p => format!("`[{}]`", p.replace("[]", "")),
    }
}

/// The GitHub anchor of a heading.
pub(super) fn slug(heading: &str) -> String {
    (heading.to_lowercase().chars())
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// An example of `check-config` for a key: the key, the configuration, what it says.
type Example = (&'static str, String, String);

pub(super) fn write(defs: &Defs, tables: &[Table]) -> Result<String, ReferenceError> {
    let defaults = defaults();
    let examples = checked_examples(tables)?;
    let mut md = String::new();
    md.push_str(include_str!("intro.md"));
    let unknown = message("[redis]\nurll = \"redis://127.0.0.1:6379\"\n").unwrap_or_default();
    writeln!(md, "\ncheck-config says:\n\n    {unknown}\n").unwrap();
    md.push_str("## Sections\n\n");
    for t in tables {
        let h = heading(&t.path);
        let docs = table_docs(&t.docs);
        let first = docs.split("\n\n").next().unwrap_or("");
        let first = first.split(". ").next().unwrap_or("").trim_end_matches('.');
        writeln!(md, "- [{h}](#{}): {first}.", slug(&h)).unwrap();
    }
    for t in tables {
        write_table(&mut md, defs, t, tables, &examples, &defaults)?;
    }
    Ok(md)
}

/// Each of [`examples::EXAMPLES`] with what check-config says about it, checked: it is
/// refused, the message names the key, and the key is a table or a setting.
fn checked_examples(tables: &[Table]) -> Result<Vec<Example>, ReferenceError> {
    let mut examples: Vec<Example> = Vec::new();
    for (key, config) in examples::EXAMPLES {
        let config = examples::toml(config);
        let said = message(&config)
            .ok_or_else(|| ReferenceError::Example(key.to_string(), "is accepted".into()))?;
        let name = key.rsplit('.').next().unwrap_or(key).trim_end_matches("[]");
        if !said.contains(name) {
            return Err(ReferenceError::Example(
                key.to_string(),
                format!("the message does not name it: {said}"),
            ));
        }
        let known =
            (tables.iter()).any(|t| t.path == *key || t.settings.iter().any(|s| s.0 == *key));
        if !known {
            return Err(ReferenceError::Example(
                key.to_string(),
                "no such setting".into(),
            ));
        }
        examples.push((key, config, said));
    }
    Ok(examples)
}

/// One table's section: its description, its examples, the table of its settings and
/// each setting's details.
fn write_table(
    md: &mut String,
    defs: &Defs,
    t: &Table,
    tables: &[Table],
    examples: &[Example],
    defaults: &toml::Value,
) -> Result<(), ReferenceError> {
    let h = heading(&t.path);
    writeln!(md, "\n## {h}\n\n{}\n", table_docs(&t.docs)).unwrap();
    if t.overrides {
        md.push_str("A route overrides these settings of [`[idempotency]`](#idempotency); the others are global:\n\n");
        for (key, item, scope) in tables.iter().flat_map(|t| &t.settings) {
            if *scope == Scope::Overridable && key.matches('.').count() == 1 {
                writeln!(md, "- [`{}`](#{})", item.name, slug(key)).unwrap();
            }
        }
        for sub in tables.iter().filter(|t| t.path.starts_with("idempotency.")) {
            let (name, h) = (&sub.path["idempotency.".len()..], heading(&sub.path));
            writeln!(md, "- [`{name}`](#{}), the whole table", slug(&h)).unwrap();
        }
        return Ok(());
    }
    for (_, config, said) in examples.iter().filter(|(k, _, _)| *k == t.path) {
        writeln!(
            md,
            "check-config, when it is wrong:\n\n```toml\n{config}```\n\n    {said}\n"
        )
        .unwrap();
    }
    if t.settings.is_empty() {
        return Ok(());
    }
    md.push_str("| Setting | Type | Default | Scope |\n|---|---|---|---|\n");
    let mut details = String::new();
    for (key, item, scope) in &t.settings {
        let (ty, values) = type_name(defs, key, &item.ty)?;
        let default = default_text(t, key, item, defaults)?;
        writeln!(
            md,
            "| [`{}`](#{}) | {ty} | {default} | {} |",
            item.name,
            slug(key),
            scope.text()
        )
        .unwrap();
        let about = format!("Type: {ty}. Default: {default}. Scope: {}.", scope.text());
        write_setting(&mut details, key, item, &about, values, examples)?;
    }
    md.push_str(&details);
    Ok(())
}

/// The details of the setting `key`: its description, `about` (type, default, scope),
/// its environment variable, its values and its examples.
fn write_setting(
    details: &mut String,
    key: &str,
    item: &Item,
    about: &str,
    values: Option<&Def>,
    examples: &[Example],
) -> Result<(), ReferenceError> {
    writeln!(details, "\n### `{key}`\n\n{}\n", markdown(&item.docs)).unwrap();
    details.push_str(about);
    if !key.contains("[]") {
        write!(
            details,
            " Environment: `IDEMGATE__{}`.",
            key.to_uppercase().replace('.', "__")
        )
        .unwrap();
    }
    details.push('\n');
    if let Some(def) = values {
        write_values(details, key, def)?;
    }
    for (_, config, said) in examples.iter().filter(|(k, _, _)| *k == key) {
        writeln!(
            details,
            "\ncheck-config, when it is wrong:\n\n```toml\n{config}```\n\n    {said}"
        )
        .unwrap();
    }
    Ok(())
}

/// The values of the enum setting `key`, each with its description, checked against
/// the loader (each value must be accepted).
fn write_values(details: &mut String, key: &str, def: &Def) -> Result<(), ReferenceError> {
    // The enum's own doc, unless it only names the setting.
    let about = table_docs(&def.docs);
    if !(about.is_empty() || about.starts_with('`') && !about.contains(' ')) {
        writeln!(details, "\n{about}").unwrap();
    }
    details.push_str("\nValues:\n\n");
    for v in &def.items {
        let name = variant_name(def, v);
        if v.docs.is_empty() {
            let value = format!("{key} = \"{name}\"");
            return Err(ReferenceError::Undocumented(vec![value]));
        }
        let said = message(&toml_for(key, &format!("\"{name}\""))).unwrap_or_default();
        if said.contains("unknown variant") {
            return Err(ReferenceError::Example(
                key.to_string(),
                format!("`{name}` is refused: {said}"),
            ));
        }
        writeln!(details, "- `\"{name}\"`: {}", markdown(&v.docs)).unwrap();
    }
    Ok(())
}

/// The default as the table shows it: the serialised value, `none`, or `required`.
fn default_text(
    t: &Table,
    key: &str,
    item: &Item,
    defaults: &toml::Value,
) -> Result<String, ReferenceError> {
    let optional = item.ty.starts_with("Option<");
    if !(t.container_default || item.has("default") || optional) {
        return Ok("required".into());
    }
    match lookup(defaults, key) {
        Some(value) => Ok(format!("`{value}`")),
        None if optional => Ok("none".into()),
        // Left out when false (`skip_serializing_if = "std::ops::Not::not"`).
        None if item.ty == "bool" && item.has("skip_serializing_if") => Ok("`false`".into()),
        None => Err(ReferenceError::Missing(key.into(), "a default".into())),
    }
}
