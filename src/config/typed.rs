//! Serde for the `http` types the configuration holds (methods, header names,
//! statuses, the upstream URL, socket addresses): each parses once, while it is
//! deserialised, and a value that does not parse is an error that figment reports
//! with its key (`idempotency.methods[0]`, `routes[0].upstream`).
//!
//! Used as `#[serde(with = "typed")]` on a field of a [`Repr`] type, a `Vec` of one,
//! or an `Option` of either.

use std::net::SocketAddr;

use http::{HeaderName, Method, StatusCode, Uri};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A type with a configuration form: how it is read and written.
pub trait Repr: Sized {
    fn de<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error>;
    fn ser<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error>;
}

pub fn serialize<T: Repr, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    value.ser(s)
}

pub fn deserialize<'de, T: Repr, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
    T::de(d)
}

/// Reads a string and parses it; the message names the value, figment the key.
fn parse_str<'de, D: Deserializer<'de>, T>(
    d: D,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, D::Error> {
    let text = String::deserialize(d)?;
    parse(&text).map_err(D::Error::custom)
}

impl Repr for Method {
    fn de<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        parse_str(d, |m| {
            (m.bytes().all(|b| !b.is_ascii_lowercase()))
                .then(|| Method::from_bytes(m.as_bytes()).ok())
                .flatten()
                .ok_or_else(|| format!("`{m}` is not an upper-case HTTP method"))
        })
    }
    fn ser<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Repr for HeaderName {
    fn de<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        parse_str(d, |h| {
            HeaderName::from_bytes(h.as_bytes())
                .map_err(|_| format!("`{h}` is not a valid header name"))
        })
    }
    fn ser<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl Repr for StatusCode {
    fn de<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let code = u16::deserialize(d)?;
        (100..=599)
            .contains(&code)
            .then(|| StatusCode::from_u16(code).ok())
            .flatten()
            .ok_or_else(|| D::Error::custom(format!("{code} is not an HTTP status")))
    }
    fn ser<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u16(self.as_u16())
    }
}

/// An upstream: `http://host:port` or `https://host:port`, optionally with a path
/// prefix, no query.
impl Repr for Uri {
    fn de<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        parse_str(d, |text| {
            let uri: Uri = text.parse().map_err(|e| format!("not a URL: {e}"))?;
            let web = matches!(uri.scheme_str(), Some("http" | "https"));
            if !web || uri.authority().is_none() {
                return Err("must be an http://host:port or https://host:port URL".into());
            }
            if uri.query().is_some() {
                return Err("must not carry a query string".into());
            }
            Ok(uri)
        })
    }
    fn ser<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl Repr for SocketAddr {
    fn de<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        parse_str(d, |a| {
            a.parse()
                .map_err(|_| format!("`{a}` is not an IP:port socket address"))
        })
    }
    fn ser<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Each element through its [`Repr`], so an error carries its index.
impl<T: Repr> Repr for Vec<T> {
    fn de<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let items = Vec::<Owned<T>>::deserialize(d)?;
        Ok(items.into_iter().map(|Owned(v)| v).collect())
    }
    fn ser<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter().map(Borrowed))
    }
}

impl<T: Repr> Repr for Option<T> {
    fn de<'de, D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Option::<Owned<T>>::deserialize(d)?.map(|Owned(v)| v))
    }
    fn ser<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Some(v) => s.serialize_some(&Borrowed(v)),
            None => s.serialize_none(),
        }
    }
}

struct Owned<T>(T);

impl<'de, T: Repr> Deserialize<'de> for Owned<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::de(d).map(Owned)
    }
}

struct Borrowed<'a, T>(&'a T);

impl<T: Repr> Serialize for Borrowed<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.ser(s)
    }
}
