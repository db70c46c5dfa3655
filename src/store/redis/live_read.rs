//! The Rust side of `lua/live_read.lua`: a joiner's read of a live stream, answered
//! only while the stream is the one of the execution that holds or completed the
//! record ([`super::live`] has the stream's layout and its writer's side).

use fred::prelude::Value;

use super::live::{live_key, Entry};
use super::{scripts, RedisStore};
use crate::store::StoreError;

/// What a read of a live stream found ([`RedisStore::live_read`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveRead {
    /// The stream is not (or no longer) the answer of the execution that holds or
    /// completed the record: the record is gone or another's, or the stream is.
    Gone,
    /// The stream's owner (the SHA-1 of its execution's lock token), whether the record
    /// is completed, and the entries read, with their ids.
    Read {
        owner: String,
        completed: bool,
        entries: Vec<(String, Entry)>,
    },
}

/// The one decoder of `lua/live_read.lua`'s reply.
fn decode_live_read(reply: Value) -> Result<LiveRead, StoreError> {
    let bad = || StoreError::Protocol {
        script: "live_read",
        detail: "not {\"G\"} nor {owner, state, id, field, value, ...}".to_string(),
    };
    let Value::Array(values) = reply else {
        return Err(bad());
    };
    let mut values = values.into_iter();
    let owner = values
        .next()
        .and_then(|v| v.into_string())
        .ok_or_else(bad)?;
    if owner == "G" {
        return Ok(LiveRead::Gone);
    }
    let completed = match values.next().and_then(|v| v.into_string()).as_deref() {
        Some("L") => false,
        Some("C") => true,
        _ => return Err(bad()),
    };
    let mut entries = Vec::with_capacity(values.len() / 3);
    while let Some(id) = values.next() {
        let (Some(id), Some(name), Some(value)) = (
            id.into_string(),
            values.next().and_then(|v| v.into_string()),
            values.next().and_then(|v| v.into_bytes()),
        ) else {
            return Err(bad());
        };
        if let Some(entry) = Entry::from_field(&name, value) {
            entries.push((id, entry));
        }
    }
    Ok(LiveRead::Read {
        owner,
        completed,
        entries,
    })
}

impl RedisStore {
    /// Runs `lua/live_read.lua`: up to `count` entries of the record's live stream after
    /// the entry `after` (`None`: from its start), while the stream is the one of the
    /// execution that holds or completed the record: `owner` as an earlier read of the
    /// same reader returned it, or `None` to start (then the record must be leased and
    /// the stream's head its holder's, and the entries start with the head).
    ///
    /// KEYS: `[record key, live stream key]`. ARGV: `[owner or "", after id or "-",
    /// count]`. Reply: `{"G"}` gone, or `{owner, state, id, field, value, ...}`; decoded
    /// here, once.
    pub async fn live_read(
        &self,
        key: &str,
        owner: Option<&str>,
        after: Option<&str>,
        count: u64,
    ) -> Result<LiveRead, StoreError> {
        let args = || -> Vec<Value> {
            vec![
                owner.unwrap_or("").into(),
                after.unwrap_or("-").into(),
                i64::try_from(count).unwrap_or(i64::MAX).into(),
            ]
        };
        let call = || (vec![key.to_string(), live_key(key)], args());
        let client = self.inner.lanes.for_key(key);
        let reply: Value = scripts::eval(&self.inner.live_read, client, call).await?;
        decode_live_read(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::String(v.into())
    }

    #[test]
    fn a_reply_decodes_once_into_gone_or_the_entries_read() {
        assert_eq!(
            decode_live_read(Value::Array(vec![s("G")])).unwrap(),
            LiveRead::Gone
        );
        let reply = Value::Array(vec![
            s("0a1b"),
            s("C"),
            s("1-0"),
            s("h"),
            Value::Bytes("head".into()),
            s("1-1"),
            s("d"),
            Value::Bytes("piece".into()),
            s("1-2"),
            s("?"),
            Value::Bytes("a field of a later release".into()),
        ]);
        let LiveRead::Read {
            owner,
            completed,
            entries,
        } = decode_live_read(reply).unwrap()
        else {
            panic!("not read");
        };
        assert_eq!((owner.as_str(), completed), ("0a1b", true));
        assert_eq!(
            entries,
            vec![
                ("1-0".to_string(), Entry::Head("head".into())),
                ("1-1".to_string(), Entry::Data("piece".into())),
            ],
            "an unknown field is skipped"
        );
    }

    #[test]
    fn a_reply_of_another_shape_is_a_protocol_error() {
        for reply in [
            Value::Null,
            Value::Array(vec![]),
            Value::Array(vec![s("owner"), s("X")]),
            Value::Array(vec![s("owner"), s("L"), s("1-0"), s("d")]),
        ] {
            let e = decode_live_read(reply.clone()).unwrap_err();
            assert!(
                matches!(
                    e,
                    StoreError::Protocol {
                        script: "live_read",
                        ..
                    }
                ),
                "{reply:?}: {e}"
            );
        }
    }
}
