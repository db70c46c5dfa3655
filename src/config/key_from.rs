//! `idempotency.key_from`: where a keyed request's idempotency key is read: its header
//! (`"header"`), or a string in its JSON body (`"json:/pointer"`).

use std::fmt;
use std::str::FromStr;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::pointer::JsonPointer;

/// Where the key comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum KeyFrom {
    /// The key header (`header`, then `header_aliases`).
    #[default]
    Header,
    /// The string at this pointer in the JSON body; the header, when also present, wins
    /// and must agree.
    Json(JsonPointer),
}

impl FromStr for KeyFrom {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text == "header" {
            return Ok(Self::Header);
        }
        let Some(pointer) = text.strip_prefix("json:") else {
            return Err(format!(
                "`{text}` is neither \"header\" nor \"json:<JSON Pointer>\" (\"json:/idempotency_key\")"
            ));
        };
        let pointer: JsonPointer = pointer.parse().map_err(|e| format!("`{text}`: {e}"))?;
        if pointer.has_wildcard() || pointer.segments().is_empty() {
            return Err(format!(
                "`{text}`: the pointer must name one member (no `*`, not the whole body)"
            ));
        }
        Ok(Self::Json(pointer))
    }
}

impl fmt::Display for KeyFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header => f.write_str("header"),
            Self::Json(pointer) => write!(f, "json:{pointer}"),
        }
    }
}

impl Serialize for KeyFrom {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for KeyFrom {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_header_and_json_pointers_and_refuses_the_rest() {
        assert_eq!("header".parse::<KeyFrom>(), Ok(KeyFrom::Header));
        let json: KeyFrom = "json:/meta/idempotency_key".parse().unwrap();
        assert_eq!(json.to_string(), "json:/meta/idempotency_key");
        for bad in [
            "Header",
            "json:",
            "json:/items/*/key",
            "json:key",
            "body",
            "json:/a~2",
        ] {
            assert!(bad.parse::<KeyFrom>().is_err(), "{bad}");
        }
    }
}
