//! The decoders of the Lua scripts' replies (`store::redis`): `claim.lua`/`peek.lua`
//! and `invalidate.lua`. Properties: no reply panics either decoder (values of every
//! RESP type, nested, tags and shapes near the real ones); a well-formed reply decodes
//! to what it says (fencing token, times clamped at zero, the stored record, byte for
//! byte); a reply of the wrong shape is an error.
#![no_main]

use std::time::Duration;

use arbitrary::{Result, Unstructured};
use bytes::Bytes;
use idemgate::fuzzing::{decode_invalidate_reply, decode_record_reply, Invalidated, Record, Value};
use idemgate::idempotency::{Claim, StoredRecord};
use libfuzzer_sys::fuzz_target;

const TAGS: &[&str] = &["A", "C", "I", "M", "N", "D", "L", "", "AC"];

fn value(u: &mut Unstructured, depth: usize) -> Result<Value> {
    Ok(match u.int_in_range(0..=8)? {
        0 => Value::Null,
        1 => Value::Integer(u.arbitrary()?),
        2 => Value::Bytes(Bytes::copy_from_slice(u.arbitrary::<&[u8]>()?)),
        3 => Value::from(u.arbitrary::<&str>()?),
        4 => Value::Double(u.arbitrary()?),
        5 => Value::Boolean(u.arbitrary()?),
        6 => Value::Queued,
        7 => Value::from(*u.choose(TAGS)?),
        _ if depth >= 4 => Value::Null,
        _ => {
            let n = u.int_in_range(0..=4)?;
            Value::Array((0..n).map(|_| value(u, depth + 1)).collect::<Result<_>>()?)
        }
    })
}

/// A reply: any value, or an array that starts with a known tag.
fn reply(u: &mut Unstructured) -> Result<Value> {
    if u.arbitrary()? {
        return value(u, 0);
    }
    let mut items = vec![Value::from(*u.choose(TAGS)?)];
    for _ in 0..u.int_in_range(0..=3)? {
        items.push(value(u, 1)?);
    }
    Ok(Value::Array(items))
}

fn ms(v: i64) -> Duration {
    Duration::from_millis(v.max(0) as u64)
}

/// Well-formed replies decode to what they carry.
fn well_formed(u: &mut Unstructured) -> Result<()> {
    let (a, b): (i64, i64) = (u.arbitrary()?, u.arbitrary()?);
    let tag = |t: &str| Value::from(t);
    let claim = |items: Vec<Value>| decode_record_reply("claim", Value::Array(items));
    match claim(vec![tag("A"), Value::Integer(a), Value::Integer(b)]) {
        Ok(Record::Acquired(acq)) => assert_eq!((acq.fence, acq.marker_age), (a, ms(b))),
        other => panic!("A: {other:?}"),
    }
    let response = idemgate_fuzz::stored_response(u)?;
    let raw = response.encode();
    match claim(vec![tag("C"), Value::Bytes(raw.clone()), Value::Integer(b)]) {
        Ok(Record::Known(Claim::Completed {
            response: record,
            remaining,
        })) => {
            assert_eq!(record, StoredRecord::Plain(response));
            assert_eq!(record.to_bytes(), raw);
            assert_eq!(remaining, ms(b));
        }
        other => panic!("C: {other:?}"),
    }
    match claim(vec![tag("I"), Value::Integer(a)]) {
        Ok(Record::Known(Claim::InFlight { remaining })) => assert_eq!(remaining, ms(a)),
        other => panic!("I: {other:?}"),
    }
    assert!(matches!(
        claim(vec![tag("M")]),
        Ok(Record::Known(Claim::Mismatch))
    ));
    assert!(matches!(claim(vec![tag("N")]), Ok(Record::Absent)));
    assert!(claim(vec![tag("A"), Value::Integer(a)]).is_err());
    assert!(claim(vec![tag("C"), Value::Bytes(raw)]).is_err());
    assert!(claim(vec![tag("I")]).is_err());
    let inval = |items: Vec<Value>| decode_invalidate_reply(Value::Array(items));
    assert_eq!(inval(vec![tag("D")]).unwrap(), Invalidated::Deleted);
    assert_eq!(inval(vec![tag("A")]).unwrap(), Invalidated::Absent);
    assert_eq!(
        inval(vec![tag("L"), Value::Integer(a)]).unwrap(),
        Invalidated::Leased { remaining: ms(a) }
    );
    assert!(inval(vec![tag("L")]).is_err());
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    if let Ok(reply) = reply(&mut u) {
        let _ = decode_record_reply("claim", reply.clone());
        let _ = decode_invalidate_reply(reply);
    }
    let _ = well_formed(&mut u);
});
