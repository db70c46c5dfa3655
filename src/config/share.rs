//! A share of a process-wide limit ([`Share`]): written as a percentage (`"25%"`),
//! parsed once while the configuration is read.

use std::fmt;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A share of a limit, between 1% and 100% in whole percents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    percent: u8,
}

impl Share {
    /// `percent` of a limit; `None` outside 1..=100.
    pub const fn percent(percent: u8) -> Option<Self> {
        if percent == 0 || percent > 100 {
            return None;
        }
        Some(Self { percent })
    }

    /// This share of `limit`, rounded up, at least 1 (when `limit` is).
    pub fn of(self, limit: u64) -> u64 {
        (limit.saturating_mul(self.percent as u64)).div_ceil(100)
    }

    fn parse(text: &str) -> Result<Self, String> {
        let number = (text.trim().strip_suffix('%'))
            .ok_or_else(|| format!("`{text}` is not a percentage such as \"25%\""))?;
        (number.trim().parse::<u8>().ok())
            .and_then(Self::percent)
            .ok_or_else(|| format!("`{text}` is not a whole percentage between 1% and 100%"))
    }
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}%", self.percent)
    }
}

impl Serialize for Share {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Share {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Self::parse(&text).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_parses_from_a_percentage_and_rounds_up() {
        let quarter = Share::parse("25%").unwrap();
        assert_eq!(quarter.of(128), 32);
        assert_eq!(quarter.of(1), 1);
        assert_eq!(quarter.of(5), 2);
        assert_eq!(Share::parse(" 100 % ").unwrap().of(7), 7);
        assert_eq!(quarter.to_string(), "25%");
        for wrong in ["25", "0%", "101%", "-5%", "12.5%", "%"] {
            assert!(Share::parse(wrong).is_err(), "{wrong}");
        }
    }
}
