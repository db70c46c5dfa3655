//! Reads the configuration types out of the source files of `src/config/` (embedded in
//! this tool): each struct's fields and each enum's variants, with their doc comments,
//! their serde attributes and their Rust types, and the settings declared in the
//! `idempotency_settings!` invocation. A line reader, not a Rust parser: it knows the
//! shapes this module's files use, and [`super::render`] checks what it found against
//! the compiled schema (serde's own list of fields), so a shape it misreads fails the
//! reference's test instead of going unnoticed.

use std::collections::HashMap;

/// A struct field, an enum variant or a declared idempotency setting.
#[derive(Debug, Clone, Default)]
pub struct Item {
    pub name: String,
    /// The Rust type as written (empty for a variant).
    pub ty: String,
    /// The doc comment, lines joined (paragraphs kept).
    pub docs: String,
    /// The contents of each `#[serde(...)]`, split at top-level commas.
    pub serde: Vec<String>,
    /// Declared under `global { }` of `idempotency_settings!`: not overridable per route.
    pub global_only: bool,
}

impl Item {
    /// Whether a serde attribute is `flag` or `flag = ...`.
    pub fn has(&self, flag: &str) -> bool {
        has(&self.serde, flag)
    }
}

fn has(serde: &[String], flag: &str) -> bool {
    (serde.iter()).any(|a| a == flag || a.starts_with(&format!("{flag} ")))
}

/// A struct or an enum.
#[derive(Debug, Clone, Default)]
pub struct Def {
    pub docs: String,
    pub serde: Vec<String>,
    /// Fields (struct) or variants (enum).
    pub items: Vec<Item>,
    pub is_enum: bool,
}

impl Def {
    pub fn has(&self, flag: &str) -> bool {
        has(&self.serde, flag)
    }
}

/// Every struct and enum of the files read, by name.
pub type Defs = HashMap<String, Def>;

/// Reads `files` into their definitions.
pub fn parse(files: &[&str]) -> Defs {
    let mut defs = Defs::new();
    for file in files {
        parse_file(file, &mut defs);
    }
    // The settings of the macro invocation are the fields of both generated structs.
    if let Some(settings) = defs.remove("idempotency_settings!") {
        let route: Vec<Item> = (settings.items.iter())
            .filter(|i| !i.global_only)
            .cloned()
            .collect();
        defs.entry("IdempotencyConfig".into()).or_default().items = settings.items;
        defs.entry("IdempotencyOverrides".into()).or_default().items = route;
    }
    defs
}

enum State {
    Top,
    Body(String),
    /// Inside `idempotency_settings! { ... }`; `global` once in its `global { }`.
    Macro {
        global: bool,
        /// A setting whose default runs over several lines, until its `;`.
        continued: bool,
    },
}

fn parse_file(text: &str, defs: &mut Defs) {
    let (mut docs, mut attrs): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    let mut state = State::Top;
    for raw in text.lines() {
        let line = raw.trim();
        if let State::Macro {
            continued: continued @ true,
            ..
        } = &mut state
        {
            *continued = !line.ends_with(';');
            continue;
        }
        if let Some(doc) = line.strip_prefix("///") {
            docs.push(doc.strip_prefix(' ').unwrap_or(doc).to_string());
            continue;
        }
        if line.starts_with("#[") {
            attrs.push(line.to_string());
            continue;
        }
        match &mut state {
            State::Top => {
                if line == "idempotency_settings! {" {
                    state = State::Macro {
                        global: false,
                        continued: false,
                    };
                } else if let Some((kind, name)) = item_start(line) {
                    let def = Def {
                        docs: join(&docs),
                        serde: serde_args(&attrs),
                        items: Vec::new(),
                        is_enum: kind == "enum",
                    };
                    defs.insert(name.clone(), def);
                    state = State::Body(name);
                }
            }
            State::Body(name) => {
                if line == "}" {
                    state = State::Top;
                } else if let Some(item) = member(line, defs[name.as_str()].is_enum) {
                    let item = Item {
                        docs: join(&docs),
                        serde: serde_args(&attrs),
                        ..item
                    };
                    defs.get_mut(name.as_str()).unwrap().items.push(item);
                }
            }
            State::Macro { global, continued } => {
                if macro_line(line, global, continued, (&docs, &attrs), defs) {
                    state = State::Top;
                }
            }
        }
        docs.clear();
        attrs.clear();
    }
}

/// One line inside `idempotency_settings! { ... }`: a setting (with the doc comment
/// and attributes before it) joins the declared settings. Returns whether the
/// invocation ended.
fn macro_line(
    line: &str,
    global: &mut bool,
    continued: &mut bool,
    (docs, attrs): (&[String], &[String]),
    defs: &mut Defs,
) -> bool {
    if line == "global {" {
        *global = true;
    } else if line == "}" && *global {
        // The end of `global { }`; the invocation's own `}` follows.
        *global = false;
        return true;
    } else if let Some((name, rest)) = line.split_once(':') {
        if is_ident(name) {
            let ty = rest.split_once('=').map_or(rest, |(ty, _)| ty);
            let settings = defs.entry("idempotency_settings!".into()).or_default();
            settings.items.push(Item {
                name: name.to_string(),
                ty: ty.trim().to_string(),
                docs: join(docs),
                serde: serde_args(attrs),
                global_only: *global,
            });
            *continued = !line.ends_with(';');
        }
    }
    false
}

/// `pub struct Name {` or `enum Name {`: the kind and the name.
fn item_start(line: &str) -> Option<(&'static str, String)> {
    let line = line.strip_prefix("pub ").unwrap_or(line);
    let line = line.strip_suffix(" {")?;
    for kind in ["struct", "enum"] {
        if let Some(name) = line.strip_prefix(kind).and_then(|r| r.strip_prefix(' ')) {
            if is_ident(name) {
                return Some((kind, name.to_string()));
            }
        }
    }
    None
}

/// A field (`pub name: Type,`) or a variant (`Name,`).
fn member(line: &str, is_enum: bool) -> Option<Item> {
    let line = line.strip_suffix(',')?;
    if is_enum {
        let name = line.split('(').next()?;
        return is_ident(name).then(|| Item {
            name: name.to_string(),
            ..Item::default()
        });
    }
    let line = line.strip_prefix("pub ").unwrap_or(line);
    let (name, ty) = line.split_once(':')?;
    is_ident(name).then(|| Item {
        name: name.to_string(),
        ty: ty.trim().to_string(),
        ..Item::default()
    })
}

fn is_ident(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Doc lines as Markdown: lines of a paragraph joined, paragraphs kept.
fn join(lines: &[String]) -> String {
    let mut out = String::new();
    for line in lines {
        if line.is_empty() {
            out.push_str("\n\n");
        } else {
            if !(out.is_empty() || out.ends_with('\n')) {
                out.push(' ');
            }
            out.push_str(line);
        }
    }
    out.trim().to_string()
}

/// The arguments of every `#[serde(...)]` among `attrs`.
fn serde_args(attrs: &[String]) -> Vec<String> {
    (attrs.iter())
        .filter_map(|a| a.strip_prefix("#[serde(")?.strip_suffix(")]"))
        .flat_map(|args| args.split(", ").map(|a| a.trim().to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_fields_variants_and_the_declared_settings() {
        let defs = super::parse(&[
            "/// A table.\n#[serde(deny_unknown_fields, default)]\npub struct T {\n    \
             /// First line\n    /// second.\n    ///\n    /// Next.\n    \
             #[serde(with = \"humantime_serde\")]\n    pub d: Duration,\n    pub n: usize,\n}\n\
             #[serde(rename_all = \"snake_case\")]\nenum E {\n    /// One.\n    One,\n    TwoWords,\n}\n\
             idempotency_settings! {\n    route {\n        /// A.\n        a: Vec<u8> = vec![\n            \
             1,\n        ];\n        b: bool = false;\n    }\n    global {\n        c: u32 = 1;\n    }\n}\n",
        ]);
        let t = &defs["T"];
        assert!(t.has("default") && !t.is_enum);
        assert_eq!(t.items[0].docs, "First line second.\n\nNext.");
        assert!(t.items[0].has("with"));
        assert_eq!(
            (t.items[1].name.as_str(), t.items[1].ty.as_str()),
            ("n", "usize")
        );
        let e = &defs["E"];
        assert_eq!(e.items.len(), 2);
        assert_eq!(e.items[0].docs, "One.");
        let names =
            |d: &str| -> Vec<String> { defs[d].items.iter().map(|i| i.name.clone()).collect() };
        assert_eq!(names("IdempotencyConfig"), ["a", "b", "c"]);
        assert_eq!(names("IdempotencyOverrides"), ["a", "b"]);
        assert_eq!(defs["IdempotencyConfig"].items[0].ty, "Vec<u8>");
    }
}
