//! [`StatusSet`]: the upstream statuses a setting names (`release_statuses`), each an
//! exact code (`503`) or a whole class (`"5xx"`). Parsed once with the configuration;
//! whether a status is in the set is two bit tests, however long the list.

use http::StatusCode;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One entry of a status list, as written: a code, or a class (`"4xx"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusEntry {
    Code(StatusCode),
    /// The hundreds digit: 1 to 5.
    Class(u8),
}

/// Statuses named by codes and classes, in the order written (for the reference and
/// `check-config`), with their members as bits: O(1) [`contains`](Self::contains).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusSet {
    entries: Vec<StatusEntry>,
    /// Bit `n` set: class `n`xx (1 to 5) is in.
    classes: u8,
    /// Bit `code` set: that exact code is in (100 to 599).
    codes: [u64; 10],
}

impl StatusSet {
    /// The set of `entries`, in that order.
    pub fn new(entries: Vec<StatusEntry>) -> Self {
        let (mut classes, mut codes) = (0u8, [0u64; 10]);
        for entry in &entries {
            match *entry {
                StatusEntry::Class(class) => classes |= 1 << class,
                StatusEntry::Code(code) => {
                    let n = usize::from(code.as_u16());
                    codes[n / 64] |= 1 << (n % 64);
                }
            }
        }
        Self {
            entries,
            classes,
            codes,
        }
    }

    /// The set of exactly these codes.
    pub fn codes(codes: &[StatusCode]) -> Self {
        Self::new(codes.iter().copied().map(StatusEntry::Code).collect())
    }

    /// Whether `status` is one of the codes, or in one of the classes.
    pub fn contains(&self, status: StatusCode) -> bool {
        let n = status.as_u16();
        let class = n / 100;
        if class < 8 && self.classes & (1 << class) != 0 {
            return true;
        }
        let n = usize::from(n);
        (self.codes.get(n / 64)).is_some_and(|bits| bits & (1 << (n % 64)) != 0)
    }

    /// The entries, as written.
    pub fn entries(&self) -> &[StatusEntry] {
        &self.entries
    }

    /// The index and text of the first entry that names a success (`200` to `299`, or
    /// `"2xx"`), if any.
    pub fn first_success(&self) -> Option<(usize, String)> {
        (self.entries.iter().enumerate()).find_map(|(i, entry)| match *entry {
            StatusEntry::Class(2) => Some((i, "\"2xx\"".to_string())),
            StatusEntry::Code(code) if code.is_success() => Some((i, code.as_u16().to_string())),
            _ => None,
        })
    }
}

impl StatusEntry {
    /// A class as written: `"5xx"` (either case of `x`).
    fn parse_class(text: &str) -> Result<Self, String> {
        let bytes = text.as_bytes();
        let class = match bytes {
            [d @ b'1'..=b'5', x, y]
                if x.eq_ignore_ascii_case(&b'x') && y.eq_ignore_ascii_case(&b'x') =>
            {
                d - b'0'
            }
            _ => {
                return Err(format!(
                    "\"{text}\" is not a status or a class (1xx to 5xx)"
                ))
            }
        };
        Ok(Self::Class(class))
    }

    fn from_code(code: u64) -> Result<Self, String> {
        u16::try_from(code)
            .ok()
            .filter(|c| (100..=599).contains(c))
            .and_then(|c| StatusCode::from_u16(c).ok())
            .map(Self::Code)
            .ok_or_else(|| format!("{code} is not an HTTP status"))
    }
}

/// A code as a TOML integer, a class as a string; an error names the value (figment
/// adds the key, with the entry's index).
impl<'de> Deserialize<'de> for StatusEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Code(u64),
            Text(String),
            Negative(i64),
        }
        let parsed = match Raw::deserialize(d)
            .map_err(|_| D::Error::custom("expected a status code (503) or a class (\"5xx\")"))?
        {
            Raw::Code(code) => Self::from_code(code),
            Raw::Text(text) => Self::parse_class(&text),
            Raw::Negative(n) => Err(format!("{n} is not an HTTP status")),
        };
        parsed.map_err(D::Error::custom)
    }
}

impl Serialize for StatusEntry {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Code(code) => s.serialize_u16(code.as_u16()),
            Self::Class(class) => s.collect_str(&format_args!("{class}xx")),
        }
    }
}

impl<'de> Deserialize<'de> for StatusSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<StatusEntry>::deserialize(d).map(Self::new)
    }
}

impl Serialize for StatusSet {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.entries.serialize(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, Serialize)]
    struct T {
        s: StatusSet,
    }

    fn parse(toml: &str) -> Result<StatusSet, String> {
        toml::from_str::<T>(&format!("s = {toml}"))
            .map(|t| t.s)
            .map_err(|e| e.to_string())
    }

    fn status(n: u16) -> StatusCode {
        StatusCode::from_u16(n).unwrap()
    }

    #[test]
    fn codes_and_classes_parse_and_match() {
        let set = parse("[\"4xx\", 503]").unwrap();
        assert_eq!(
            set.entries(),
            [StatusEntry::Class(4), StatusEntry::Code(status(503))]
        );
        for n in [400, 404, 422, 499, 503] {
            assert!(set.contains(status(n)), "{n}");
        }
        for n in [100, 200, 399, 500, 502, 504, 599] {
            assert!(!set.contains(status(n)), "{n}");
        }
        let fives = parse("[\"5XX\"]").unwrap();
        assert!(fives.contains(status(507)) && fives.contains(status(500)));
        assert!(!fives.contains(status(422)));
        let numbers = parse("[408, 425, 429, 502, 503, 504]").unwrap();
        assert_eq!(
            numbers,
            StatusSet::codes(&[408, 425, 429, 502, 503, 504].map(status))
        );
        assert!(numbers.contains(status(425)) && !numbers.contains(status(500)));
        assert!(!parse("[]").unwrap().contains(status(500)));
    }

    #[test]
    fn statuses_beyond_the_table_are_not_members() {
        // hyper accepts any three-digit status from an upstream.
        let set = parse("[\"5xx\", 599]").unwrap();
        assert!(!set.contains(status(600)) && !set.contains(status(999)));
        assert!(set.contains(status(599)));
    }

    #[test]
    fn bad_entries_are_named() {
        let cases = [
            (
                "[\"6xx\"]",
                "\"6xx\" is not a status or a class (1xx to 5xx)",
            ),
            ("[\"5x\"]", "\"5x\" is not a status or a class"),
            ("[\"503\"]", "\"503\" is not a status or a class"),
            ("[\"xx5\"]", "\"xx5\" is not a status or a class"),
            ("[999]", "999 is not an HTTP status"),
            ("[99]", "99 is not an HTTP status"),
            ("[-1]", "-1 is not an HTTP status"),
            ("[1.5]", "expected a status code (503) or a class (\"5xx\")"),
            ("503", "invalid type"),
        ];
        for (toml, message) in cases {
            let e = parse(toml).unwrap_err();
            assert!(e.contains(message), "{toml}: {e}");
        }
    }

    #[test]
    fn serialises_as_written_and_round_trips() {
        let t = T {
            s: parse("[\"5xx\", 429, \"1xx\"]").unwrap(),
        };
        let text = toml::to_string(&t).unwrap();
        assert_eq!(text.trim(), "s = [\"5xx\", 429, \"1xx\"]");
        assert_eq!(toml::from_str::<T>(&text).unwrap().s, t.s);
    }

    /// What `check-config` says, with the key and the entry's index.
    #[test]
    fn the_configuration_names_the_key_and_entry() {
        let err = |toml: &str| crate::Config::from_toml(toml).unwrap_err().to_string();
        let e = err("[idempotency]\nrelease_statuses = [503, \"6xx\"]\n");
        assert!(
            e.contains("idempotency.release_statuses[1]")
                && e.contains("\"6xx\" is not a status or a class (1xx to 5xx)"),
            "{e}"
        );
        let e = err("[idempotency]\nrelease_statuses = [\"5xx\", \"2xx\"]\n");
        assert!(
            e.contains("idempotency.release_statuses[1]") && e.contains("\"2xx\" is a success"),
            "{e}"
        );
        let route = "[[routes]]\nname = \"p\"\npath_prefix = \"/v1/\"\n\
                     upstream = \"http://127.0.0.1:1\"\n[routes.idempotency]\n";
        let e = err(&format!("{route}release_statuses = [\"4xx\", 201]\n"));
        assert!(
            e.contains("routes[0].idempotency.release_statuses[1]")
                && e.contains("201 is a success"),
            "{e}"
        );
        let config =
            crate::Config::from_toml(&format!("{route}release_statuses = [\"5xx\", 429]\n"));
        let effective = config.unwrap().routes[0]
            .idempotency
            .release_statuses
            .clone();
        assert_eq!(effective.unwrap(), parse("[\"5xx\", 429]").unwrap());
        let defaults = crate::Config::default().idempotency.release_statuses;
        assert_eq!(defaults, parse("[408, 425, 429, 502, 503, 504]").unwrap());
    }

    #[test]
    fn successes_are_found_with_their_index() {
        assert_eq!(
            parse("[503, \"2xx\"]").unwrap().first_success(),
            Some((1, "\"2xx\"".into()))
        );
        assert_eq!(
            parse("[201]").unwrap().first_success(),
            Some((0, "201".into()))
        );
        assert_eq!(
            parse("[\"3xx\", \"5xx\", 199, 300]")
                .unwrap()
                .first_success(),
            None
        );
    }
}
