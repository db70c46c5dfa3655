//! What the fuzz targets share: stored responses built from fuzz input, and the
//! percent-decoding the path target checks canonical paths with.

use arbitrary::{Result, Unstructured};
use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use idemgate::idempotency::StoredResponse;

/// Header names a real response carries, so that most generated headers are valid.
const NAMES: &[&str] = &[
    "content-type",
    "set-cookie",
    "location",
    "etag",
    "x-request-cost",
    "cache-control",
];

/// A response as a store would hold it: any status `StatusCode` accepts, up to 8
/// headers (real names or fuzz-chosen ones that parse), any body.
pub fn stored_response(u: &mut Unstructured) -> Result<StoredResponse> {
    let status = StatusCode::from_u16(u.int_in_range(100..=999)?).expect("100..=999 is a status");
    let mut headers = Vec::new();
    for _ in 0..u.int_in_range(0..=8)? {
        let name = if u.arbitrary()? {
            HeaderName::from_static(u.choose(NAMES)?)
        } else {
            match HeaderName::from_bytes(u.arbitrary::<&[u8]>()?) {
                Ok(name) => name,
                Err(_) => continue,
            }
        };
        let Ok(value) = HeaderValue::from_bytes(u.arbitrary::<&[u8]>()?) else {
            continue;
        };
        headers.push((name, value));
    }
    let body = Bytes::copy_from_slice(u.arbitrary::<&[u8]>()?);
    Ok(StoredResponse {
        status,
        headers,
        body,
        trailers: Vec::new(),
    })
}

/// Every `%XY` escape of `bytes` decoded (an invalid one kept as is).
pub fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| Some(hex(*bytes.get(i + 1)?)? * 16 + hex(*bytes.get(i + 2)?)?))
            .flatten();
        match escaped {
            Some(b) => {
                out.push(b as u8);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out
}
