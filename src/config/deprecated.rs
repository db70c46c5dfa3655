//! Deprecated spellings of renamed settings: an operator's configuration outlives
//! releases, so a setting that was renamed keeps its old spelling for at least one
//! release (CHANGELOG.md says which; docs/operations.md, Version policy).
//!
//! Before the schema (which refuses unknown keys) sees the configuration, every old
//! spelling found in the merged layers (file and environment) is moved to its new key,
//! converted to the new form, and reported as a [`Deprecation`]: `serve` logs a warning
//! at start and `check-config` prints one, each naming the new spelling. The old and
//! the new spelling together is an error that names both: which one is meant is unknown.

use std::fmt;

use figment::value::{Dict, Value};

use super::error::ConfigError;

/// A setting renamed within a table of the schema.
struct Rename {
    /// The table, as a key path: `idempotency` also covers every `[routes.idempotency]`;
    /// another (`server`, `redis`) is the top-level table alone.
    table: &'static str,
    old: &'static str,
    new: &'static str,
    /// The release that renamed it (CHANGELOG.md).
    since: &'static str,
    /// The old value in the new setting's form.
    convert: fn(Value) -> Value,
}

/// Every rename since the first release (`git log -p -- src/config/`).
const RENAMES: &[Rename] = &[
    Rename {
        table: "idempotency",
        old: "scope_header",
        new: "scope_headers",
        since: "0.2.0",
        convert: into_list,
    },
    // Not to be read as `idempotency.in_flight` (the answer to a duplicate whose first
    // execution still runs). The `idemgate_limited_total` label stays `max_in_flight`.
    Rename {
        table: "server",
        old: "max_in_flight",
        new: "max_concurrent_requests",
        since: "0.5.0",
        convert: same,
    },
    // Redis `WAIT`, not to be read as `idempotency.wait_timeout` (a duplicate waiting).
    Rename {
        table: "redis",
        old: "wait_replicas",
        new: "replica_acks",
        since: "0.5.0",
        convert: same,
    },
    Rename {
        table: "redis",
        old: "wait_timeout",
        new: "replica_ack_timeout",
        since: "0.5.0",
        convert: same,
    },
];

/// The same value: only the name changed.
fn same(value: Value) -> Value {
    value
}

/// One header became a list of them: `"X-Tenant-Id"` reads as `["X-Tenant-Id"]`.
fn into_list(value: Value) -> Value {
    match value {
        Value::Array(..) => value,
        one => Value::from(vec![one]),
    }
}

/// An old spelling that was read into its new setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deprecation {
    /// The key as written, `routes[0].idempotency.scope_header`.
    pub old: String,
    /// The key it was read into, `routes[0].idempotency.scope_headers`.
    pub new: String,
    /// The release that renamed it.
    pub since: &'static str,
}

impl fmt::Display for Deprecation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is deprecated (renamed in {}): read as `{}`; write `{}` instead, the old \
             spelling will be refused in a later release",
            self.old, self.since, self.new, self.new
        )
    }
}

/// Whether the merged configuration uses any old spelling (cheap: no copy).
pub(super) fn any(config: &Dict) -> bool {
    RENAMES.iter().any(|rename| {
        tables(config, rename.table)
            .iter()
            .any(|(_, table)| table.contains_key(rename.old))
    })
}

/// Moves every old spelling in `config` to its new key, or fails naming both spellings
/// when a table has both.
pub(super) fn rewrite(config: &mut Dict) -> Result<Vec<Deprecation>, ConfigError> {
    let mut found = Vec::new();
    for rename in RENAMES {
        for (at, table) in tables_mut(config, rename.table) {
            let Some(value) = table.remove(rename.old) else {
                continue;
            };
            let (old, new) = (
                format!("{at}.{}", rename.old),
                format!("{at}.{}", rename.new),
            );
            if table.contains_key(rename.new) {
                let message = format!(
                    "both `{old}` and `{new}` are set; `{}` is the deprecated spelling of \
                     `{}`: keep only `{new}`",
                    rename.old, rename.new
                );
                return Err(ConfigError::invalid(old, message));
            }
            table.insert(rename.new.to_string(), (rename.convert)(value));
            found.push(Deprecation {
                old,
                new,
                since: rename.since,
            });
        }
    }
    Ok(found)
}

/// The table at `path` and, for `idempotency`, each route's: with their key paths.
fn tables<'a>(config: &'a Dict, path: &str) -> Vec<(String, &'a Dict)> {
    let mut out = Vec::new();
    if let Some(Value::Dict(_, table)) = config.get(path) {
        out.push((path.to_string(), table));
    }
    if path == "idempotency" {
        if let Some(Value::Array(_, routes)) = config.get("routes") {
            for (i, route) in routes.iter().enumerate() {
                if let Value::Dict(_, route) = route {
                    if let Some(Value::Dict(_, table)) = route.get(path) {
                        out.push((format!("routes[{i}].{path}"), table));
                    }
                }
            }
        }
    }
    out
}

fn tables_mut<'a>(config: &'a mut Dict, path: &str) -> Vec<(String, &'a mut Dict)> {
    let mut out = Vec::new();
    let (mut top, mut routes) = (None, None);
    for (key, value) in config.iter_mut() {
        match (key.as_str(), value) {
            (k, Value::Dict(_, table)) if k == path => top = Some(table),
            ("routes", Value::Array(_, list)) if path == "idempotency" => routes = Some(list),
            _ => {}
        }
    }
    if let Some(table) = top {
        out.push((path.to_string(), table));
    }
    for (i, route) in routes.into_iter().flatten().enumerate() {
        if let Value::Dict(_, route) = route {
            if let Some(Value::Dict(_, table)) = route.get_mut(path) {
                out.push((format!("routes[{i}].{path}"), table));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    const ROUTE: &str = "[[routes]]\nname = \"a\"\npath_prefix = \"/a/\"\n\
                         upstream = \"http://127.0.0.1:1\"\n";

    /// Every rename in [`super::RENAMES`], old spelling against new: the same setting.
    #[test]
    fn every_alias_reads_into_its_new_setting_with_a_warning() {
        let names: Vec<_> = super::RENAMES.iter().map(|r| (r.old, r.new)).collect();
        assert_eq!(
            names,
            [
                ("scope_header", "scope_headers"),
                ("max_in_flight", "max_concurrent_requests"),
                ("wait_replicas", "replica_acks"),
                ("wait_timeout", "replica_ack_timeout"),
            ],
            "a new alias needs its case in this test"
        );
        let old = Config::from_toml("[idempotency]\nscope_header = \"X-Tenant-Id\"\n").unwrap();
        let new = Config::from_toml("[idempotency]\nscope_headers = [\"X-Tenant-Id\"]\n").unwrap();
        assert_eq!(old.idempotency.scope_headers, new.idempotency.scope_headers);
        assert_eq!(old.deprecated.len(), 1);
        assert!(new.deprecated.is_empty());
        let warning = old.deprecated[0].to_string();
        assert!(warning.contains("`idempotency.scope_header`"), "{warning}");
        assert!(warning.contains("`idempotency.scope_headers`"), "{warning}");

        let route = format!("{ROUTE}[routes.idempotency]\nscope_header = \"X-Org\"\n");
        let c = Config::from_toml(&route).unwrap();
        let eff = c.routes[0].idempotency.apply(&c.idempotency);
        assert_eq!(eff.scope_headers, ["x-org"]);
        assert_eq!(c.deprecated[0].old, "routes[0].idempotency.scope_header");
        assert_eq!(c.deprecated[0].new, "routes[0].idempotency.scope_headers");

        // Same form, new name: each old line reads as its new line does, with a warning.
        let read = |c: &Config| {
            let r = &c.redis;
            (
                c.server.max_concurrent_requests,
                r.replica_acks,
                r.replica_ack_timeout,
            )
        };
        for (table, old, new) in [
            ("server", "max_in_flight = 7", "max_concurrent_requests = 7"),
            ("redis", "wait_replicas = 2", "replica_acks = 2"),
            (
                "redis",
                "wait_timeout = \"40ms\"",
                "replica_ack_timeout = \"40ms\"",
            ),
        ] {
            let before = Config::from_toml(&format!("[{table}]\n{old}\n")).unwrap();
            let after = Config::from_toml(&format!("[{table}]\n{new}\n")).unwrap();
            assert_eq!(read(&before), read(&after), "{old}");
            assert_ne!(read(&after), read(&Config::default()), "{new}");
            assert!(after.deprecated.is_empty(), "{new}");
            let [deprecation] = &before.deprecated[..] else {
                panic!("{old}: {:?}", before.deprecated);
            };
            let key = |line: &str| format!("{table}.{}", line.split(' ').next().unwrap());
            assert_eq!(
                (&*deprecation.old, &*deprecation.new),
                (&*key(old), &*key(new))
            );
            assert_eq!(deprecation.since, "0.5.0");
            let warning = deprecation.to_string();
            assert!(warning.contains(&format!("`{}`", key(new))), "{warning}");
        }
        // The `[idempotency]` setting of the same name is not a Redis one.
        let wait = Config::from_toml("[idempotency]\nwait_timeout = \"3s\"\n").unwrap();
        assert!(wait.deprecated.is_empty());
        assert_eq!(
            wait.redis.replica_ack_timeout,
            Config::default().redis.replica_ack_timeout
        );
    }

    #[test]
    fn a_bad_value_under_the_old_spelling_names_the_new_key() {
        let err = Config::from_toml("[idempotency]\nscope_header = \"bad header\"\n").unwrap_err();
        assert!(
            err.to_string().contains("idempotency.scope_headers"),
            "{err}"
        );
    }

    #[test]
    fn both_spellings_at_once_is_an_error_naming_both() {
        for text in [
            "[idempotency]\nscope_header = \"A\"\nscope_headers = [\"B\"]\n".to_string(),
            format!("{ROUTE}[routes.idempotency]\nscope_header = \"A\"\nscope_headers = [\"B\"]\n"),
        ] {
            let err = Config::from_toml(&text).unwrap_err().to_string();
            assert!(
                err.contains("scope_header`") && err.contains("scope_headers`"),
                "{err}"
            );
        }
        let text = "[redis]\nwait_timeout = \"50ms\"\nreplica_ack_timeout = \"60ms\"\n";
        let err = Config::from_toml(text).unwrap_err().to_string();
        assert!(
            err.contains("`redis.wait_timeout`") && err.contains("`redis.replica_ack_timeout`"),
            "{err}"
        );
    }
}
