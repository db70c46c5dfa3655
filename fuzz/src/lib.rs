//! What the fuzz targets share: stored responses built from fuzz input, and the
//! percent-decoding the path target checks canonical paths with.

use arbitrary::{Result, Unstructured};
use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use idemgate::idempotency::stored::TraceOrigin;
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
/// headers (real names or fuzz-chosen ones that parse), any body, and up to 4 trailers
/// (a gRPC answer's; none half the time, as most responses).
pub fn stored_response(u: &mut Unstructured) -> Result<StoredResponse> {
    let status = StatusCode::from_u16(u.int_in_range(100..=999)?).expect("100..=999 is a status");
    let headers = fields(u, 8)?;
    let body = Bytes::copy_from_slice(u.arbitrary::<&[u8]>()?);
    let trailers = if u.arbitrary()? {
        fields(u, 4)?
    } else {
        Vec::new()
    };
    // The execution's trace, as a record written while spans are exported keeps it.
    let origin = u.arbitrary::<Option<([u8; 16], [u8; 8])>>()?;
    Ok(StoredResponse {
        status,
        headers,
        body,
        trailers,
        origin: origin.map(TraceOrigin::from),
    })
}

/// Up to `max` header fields, real names or fuzz-chosen ones that parse.
fn fields(u: &mut Unstructured, max: u32) -> Result<Vec<(HeaderName, HeaderValue)>> {
    let mut fields = Vec::new();
    for _ in 0..u.int_in_range(0..=max)? {
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
        fields.push((name, value));
    }
    Ok(fields)
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
