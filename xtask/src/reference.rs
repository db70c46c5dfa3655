//! The configuration reference, `docs/configuration.md`, generated from the schema by
//! `cargo xtask config-reference` (`make docs`), so that it cannot drift from it.
//!
//! Each part comes from where it is defined: the descriptions from the doc comments of
//! the configuration types (the source files of `src/config/`, embedded in this tool
//! with `include_str!`, so that changing one rebuilds it, and read by [`source`]), the
//! defaults from [`Config::default`] as serialised, the
//! list of settings checked against the compiled schema (serde's own field list of
//! every table, as its `deny_unknown_fields` error gives it), and what `check-config`
//! says about a wrong value from running [`examples`] through the loader. A setting
//! without a doc comment, a table whose fields the source and the schema disagree on,
//! or a type the reference cannot name is an error, and the test fails on it, as it
//! does when the committed file differs from what [`render`] produces.

mod examples;
mod source;
mod write;

use figment::providers::{Format, Serialized, Toml};
use figment::Figment;

use idemgate::Config;
use source::{Def, Defs, Item};

/// The files the configuration types are defined in.
const FILES: &[&str] = &[
    include_str!("../../src/config/mod.rs"),
    include_str!("../../src/config/server.rs"),
    include_str!("../../src/config/redis.rs"),
    include_str!("../../src/config/postgres.rs"),
    include_str!("../../src/config/idempotency.rs"),
    include_str!("../../src/config/policies.rs"),
    include_str!("../../src/config/fingerprint.rs"),
    include_str!("../../src/config/routes.rs"),
    include_str!("../../src/config/topology.rs"),
    include_str!("../../src/config/tls.rs"),
    include_str!("../../src/config/runtime.rs"),
    include_str!("../../src/config/encryption.rs"),
    include_str!("../../src/config/tracing.rs"),
];

/// Why the reference cannot be generated.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error("settings without a doc comment (write one in src/config/): {}", .0.join(", "))]
    Undocumented(Vec<String>),
    #[error(
        "`{table}`: the schema has the fields {schema:?}, the source of src/config/ {declared:?}"
    )]
    Drift {
        table: String,
        schema: Vec<String>,
        declared: Vec<String>,
    },
    #[error("`{0}`: the reference has no name for the type `{1}` (add one in xtask/src/reference.rs, type_name)")]
    UnknownType(String, String),
    #[error("`{0}`: no definition of `{1}` found in src/config/")]
    Missing(String, String),
    #[error("check-config example for `{0}`: {1}")]
    Example(String, String),
}

/// Who may set a setting.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    Global,
    /// `[idempotency]`: the default of every route, overridable in `[routes.idempotency]`.
    Overridable,
    /// `[idempotency]`, global only.
    GlobalOnly,
    /// A key of `[[routes]]` (or one of its tables).
    Route,
}

impl Scope {
    fn text(self) -> &'static str {
        match self {
            Scope::Global => "global",
            Scope::Overridable => "per route",
            Scope::GlobalOnly => "global",
            Scope::Route => "route",
        }
    }
}

struct Table {
    /// `redis.sentinel`, `routes[]`, `encryption.keys[]`.
    path: String,
    docs: String,
    settings: Vec<(String, Item, Scope)>,
    /// `[routes.idempotency]`: the overridable settings of `[idempotency]`.
    overrides: bool,
    /// `#[serde(default)]` on the struct: a key left out takes its default.
    container_default: bool,
}

/// The reference, as committed in `docs/configuration.md`.
pub fn render() -> Result<String, ReferenceError> {
    render_from(FILES)
}

fn render_from(files: &[&str]) -> Result<String, ReferenceError> {
    let defs = source::parse(files);
    let mut tables = Vec::new();
    for item in &get(&defs, "Config", "Config")?.items {
        if !item.has("skip") {
            walk(&defs, item, "", &mut tables)?;
        }
    }
    let undocumented: Vec<String> = (tables.iter())
        .flat_map(|t| {
            let table = t.docs.is_empty().then(|| t.path.clone());
            let settings = (t.settings.iter()).filter(|(_, i, _)| i.docs.is_empty());
            table
                .into_iter()
                .chain(settings.map(|(key, _, _)| key.clone()))
        })
        .collect();
    if !undocumented.is_empty() {
        return Err(ReferenceError::Undocumented(undocumented));
    }
    write::write(&defs, &tables)
}

fn get<'a>(defs: &'a Defs, key: &str, name: &str) -> Result<&'a Def, ReferenceError> {
    (defs.get(name)).ok_or_else(|| ReferenceError::Missing(key.into(), name.into()))
}

/// The struct a field is a table of, if it is one.
fn table_type<'a>(defs: &Defs, item: &'a Item) -> Option<&'a str> {
    if item.serde.iter().any(|a| a == "with = \"encryption\"") {
        return Some("EncryptionRepr");
    }
    let inner = strip(strip(&item.ty, "Option<"), "Vec<");
    (defs.get(inner)).filter(|d| !d.is_enum).map(|_| inner)
}

fn strip<'a>(ty: &'a str, wrapper: &str) -> &'a str {
    (ty.strip_prefix(wrapper))
        .and_then(|t| t.strip_suffix('>'))
        .unwrap_or(ty)
}

/// Adds the table `field` is (at `parent`) and the tables under it.
fn walk(
    defs: &Defs,
    field: &Item,
    parent: &str,
    out: &mut Vec<Table>,
) -> Result<(), ReferenceError> {
    let Some(name) = table_type(defs, field) else {
        return Ok(());
    };
    let mut path = if parent.is_empty() {
        field.name.clone()
    } else {
        format!("{parent}.{}", field.name)
    };
    if field.ty.starts_with("Vec<") {
        path.push_str("[]");
    }
    let def = get(defs, &path, name)?;
    let fields: Vec<&Item> = def.items.iter().filter(|i| !i.has("skip")).collect();
    check_schema(&path, &fields)?;
    let scope = |item: &Item| match path.as_str() {
        "idempotency" if item.global_only => Scope::GlobalOnly,
        "idempotency" => Scope::Overridable,
        p if p.starts_with("idempotency.") => Scope::Overridable,
        p if p.starts_with("routes[]") => Scope::Route,
        _ => Scope::Global,
    };
    let overrides = name == "IdempotencyOverrides";
    let settings = (fields.iter())
        .filter(|i| !overrides && table_type(defs, i).is_none())
        .map(|i| (format!("{path}.{}", i.name), (*i).clone(), scope(i)))
        .collect();
    let docs = match field.docs.is_empty() {
        true => def.docs.clone(),
        // Two settings of one type (`fingerprint`, `fingerprint_previous`): each its own.
        false if path.starts_with("idempotency.") => format!("{}\n\n{}", field.docs, def.docs),
        false => format!("{}\n\n{}", def.docs, field.docs),
    };
    out.push(Table {
        path: path.clone(),
        docs,
        settings,
        overrides,
        container_default: def.has("default"),
    });
    // A route's override of a table replaces the whole table: its tables are listed, not
    // walked again.
    for item in fields.into_iter().filter(|_| !overrides) {
        walk(defs, item, &path, out)?;
    }
    Ok(())
}

/// The fields serde knows for the table at `path`, against those the source declares.
fn check_schema(path: &str, fields: &[&Item]) -> Result<(), ReferenceError> {
    let probe = match path {
        "encryption.keys[]" => "[encryption]\nkeys = [{ zz_probe = 1 }]\n".to_string(),
        p => {
            let (head, tail) = p.split_once('.').unwrap_or((p, ""));
            let head = head
                .strip_suffix("[]")
                .map_or(format!("[{head}]"), |h| format!("[[{h}]]"));
            let tail = if tail.is_empty() {
                String::new()
            } else {
                format!("\n[{}]", p.replace("[]", ""))
            };
            format!("{head}{tail}\nzz_probe = 1\n")
        }
    };
    let figment =
        Figment::from(Serialized::defaults(Config::default())).merge(Toml::string(&probe));
    let schema: Vec<String> = match figment.extract::<Config>() {
        Ok(_) => Vec::new(),
        Err(e) => (e.into_iter())
            .find_map(|e| match e.kind {
                figment::error::Kind::UnknownField(_, expected) => Some(expected.to_vec()),
                _ => None,
            })
            .unwrap_or_default()
            .into_iter()
            .map(String::from)
            .collect(),
    };
    let mut declared: Vec<String> = fields.iter().map(|i| i.name.clone()).collect();
    let mut sorted = schema.clone();
    sorted.sort();
    declared.sort();
    if sorted != declared {
        return Err(ReferenceError::Drift {
            table: path.into(),
            schema,
            declared,
        });
    }
    Ok(())
}

/// The type of a setting as the reference names it, and its values if it is an enum.
fn type_name<'a>(
    defs: &'a Defs,
    key: &str,
    ty: &str,
) -> Result<(String, Option<&'a Def>), ReferenceError> {
    if let Some(inner) = ty.strip_prefix("Option<").and_then(|t| t.strip_suffix('>')) {
        return type_name(defs, key, inner);
    }
    if let Some(inner) = ty.strip_prefix("Vec<").and_then(|t| t.strip_suffix('>')) {
        let (name, values) = type_name(defs, key, inner)?;
        return Ok((format!("list of {name}"), values));
    }
    let name = match ty {
        "Duration" => "duration",
        "ByteSize" => "size",
        "SocketAddr" => "address",
        "String" => "string",
        "bool" => "boolean",
        "usize" | "u32" | "u64" => "integer",
        "f64" => "number",
        "HeaderName" => "header name",
        "JsonPointer" => "JSON Pointer",
        "Method" => "HTTP method",
        "StatusCode" => "status code",
        "KeyFrom" => "`\"header\"` or `\"json:<JSON Pointer>\"`",
        "StatusSet" => "list of status codes and classes (`\"5xx\"`)",
        "HeaderPattern" => "header name or prefix (`\"x-ratelimit-*\"`)",
        "GrpcCode" => "gRPC status name (`\"OK\"` to `\"UNAUTHENTICATED\"`)",
        "Uri" => "URL",
        "PathBuf" | "std::path::PathBuf" => "path",
        "TrustedProxies" => "list of CIDRs",
        "Workers" => "`\"auto\"` or integer",
        "Share" => "percentage (`\"25%\"`)",
        "ExpiresHeader" => "header name, or `true` / `false`",
        _ => match defs.get(ty) {
            Some(def) if def.is_enum => {
                let values: Vec<String> = (def.items.iter())
                    .map(|v| format!("`\"{}\"`", variant_name(def, v)))
                    .collect();
                return Ok((format!("one of {}", values.join(", ")), Some(def)));
            }
            _ => return Err(ReferenceError::UnknownType(key.into(), ty.into())),
        },
    };
    Ok((name.into(), None))
}

/// How a variant is spelt in the configuration.
fn variant_name(def: &Def, variant: &Item) -> String {
    if let Some(name) = (variant.serde.iter()).find_map(|a| a.strip_prefix("rename = ")) {
        return name.trim_matches('"').to_string();
    }
    let rule = (def.serde.iter()).find_map(|a| a.strip_prefix("rename_all = "));
    let mut out = String::new();
    for (i, c) in variant.name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            match rule {
                Some("\"snake_case\"") => out.push('_'),
                Some("\"kebab-case\"") => out.push('-'),
                _ => {}
            }
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests;
