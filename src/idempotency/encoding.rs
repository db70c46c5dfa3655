//! The wire encoding of a [`StoredResponse`]: what Redis stores whole and Postgres as a
//! header block and a body, and what is sealed under `[encryption]`
//! ([`super::sealed`]). Every release reads what the one before it wrote
//! ([`crate::store::formats`] lists the versions).
//!
//! Encoding (version 1): `0x01`, status (u16 BE), header count (u16 BE), then per
//! header its name length (u16 BE), name, value length (u32 BE), value; the rest is
//! the body. Version 2 is the same, sealed ([`super::sealed`]). Version 3, written only
//! for a response with trailers (a gRPC call's status): `0x03`, status, the header
//! block, then the trailers as a second block of the same form, then the body. Version
//! 4, written only for a response whose execution's trace was exported (`[tracing]`):
//! `0x04`, the trace id (16 bytes) and span id (8) of that execution, then the response
//! in version 1 or 3.

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderName, HeaderValue, StatusCode};

use super::stored::{StoredResponse, TraceOrigin, MAX_HEADERS};

/// First byte of an unsealed record: the version of this encoding ([`crate::store::formats`]).
pub const ENCODING_VERSION: u8 = 1;
/// First byte of an unsealed record with trailers (2 is the sealed envelope's).
pub const TRAILERS_VERSION: u8 = 3;
/// First byte of an unsealed record that names its execution's trace (then version 1 or 3).
pub const ORIGIN_VERSION: u8 = 4;

impl StoredResponse {
    /// A copy held in one allocation of exactly [`encoded_len`](Self::encoded_len) bytes.
    ///
    /// Header values and bodies read off a connection (hyper, fred, tokio-postgres) are
    /// slices of that connection's read buffer, so keeping one alive keeps the whole
    /// buffer alive: a few hundred bytes of response can pin kilobytes. Anything kept
    /// past the request (the replay cache) keeps this copy instead.
    pub fn compacted(&self) -> Self {
        self.encoded().compact
    }

    /// The encoding, made once for every tier: Redis stores [`Encoded::bytes`], Postgres
    /// its header block and body (slices of it), the replay cache the compact copy
    /// decoded from it (one allocation, see [`compacted`](Self::compacted)).
    pub fn encoded(&self) -> Encoded {
        let bytes = self.encode();
        // Decoding what `encode` wrote cannot fail; if it ever did, the original is still
        // a correct response, only a larger one.
        let compact = Self::decode(bytes.clone()).unwrap_or_else(|_| self.clone());
        Encoded { bytes, compact }
    }

    /// Size of the stored form, for limits and metrics.
    pub fn encoded_len(&self) -> usize {
        let block = |fields: &[(HeaderName, HeaderValue)]| {
            2 + (fields.iter())
                .map(|(n, v)| 6 + n.as_str().len() + v.len())
                .sum::<usize>()
        };
        let trailers = match self.trailers.is_empty() {
            true => 0,
            false => block(self.encoded_trailers()),
        };
        self.prefix_len() + block(self.encoded_headers()) + trailers + self.body.len()
    }

    /// The bytes before the header block: the versions, the origin and the status.
    fn prefix_len(&self) -> usize {
        3 + self.origin.map_or(0, |_| 25)
    }

    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        self.encode_into(&mut out);
        out.freeze()
    }

    /// Appends the encoding to `out` (what [`super::sealed`] encrypts in place).
    pub fn encode_into(&self, out: &mut BytesMut) {
        if let Some(origin) = self.origin {
            out.put_u8(ORIGIN_VERSION);
            out.put_slice(&origin.to_bytes());
        }
        match self.trailers.is_empty() {
            true => out.put_u8(ENCODING_VERSION),
            false => out.put_u8(TRAILERS_VERSION),
        }
        out.put_u16(self.status.as_u16());
        self.put_headers(out);
        out.put_slice(&self.body);
    }

    /// The header block alone (count, then name/value pairs; then the trailers' block
    /// when there are trailers), as Postgres stores it.
    pub fn encode_headers(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.encoded_len() - self.body.len());
        self.put_headers(&mut out);
        out.freeze()
    }

    /// The headers the encoding holds: the first `MAX_HEADERS`. Beyond them the
    /// count would wrap and the rest of the headers be read back as the body.
    fn encoded_headers(&self) -> &[(HeaderName, HeaderValue)] {
        &self.headers[..self.headers.len().min(MAX_HEADERS)]
    }

    fn encoded_trailers(&self) -> &[(HeaderName, HeaderValue)] {
        &self.trailers[..self.trailers.len().min(MAX_HEADERS)]
    }

    /// The header block, and the trailers' block when there are trailers.
    fn put_headers(&self, out: &mut BytesMut) {
        put_block(out, self.encoded_headers());
        if !self.trailers.is_empty() {
            put_block(out, self.encoded_trailers());
        }
    }

    pub fn decode(mut raw: Bytes) -> Result<Self, &'static str> {
        let mut version = take(&mut raw, 1)?[0];
        let mut origin = None;
        if version == ORIGIN_VERSION {
            origin = TraceOrigin::from_bytes(&take(&mut raw, 24)?);
            version = take(&mut raw, 1)?[0];
        }
        if version != ENCODING_VERSION && version != TRAILERS_VERSION {
            return Err("unknown encoding version");
        }
        let status = int(&mut raw, 2)? as u16;
        let headers = take_headers(&mut raw)?;
        let trailers = match version {
            TRAILERS_VERSION => take_headers(&mut raw)?,
            _ => Vec::new(),
        };
        let mut response = Self::from_parts(status, headers, raw, trailers)?;
        response.origin = origin;
        Ok(response)
    }

    /// Rebuilds a response from its status, [`encode_headers`](Self::encode_headers) block and body.
    pub fn from_stored_parts(
        status: u16,
        mut headers: Bytes,
        body: Bytes,
    ) -> Result<Self, &'static str> {
        let fields = take_headers(&mut headers)?;
        // What follows the headers in the block is the trailers' block (none before
        // trailers were stored: the block ended there).
        let trailers = match headers.is_empty() {
            true => Vec::new(),
            false => take_headers(&mut headers)?,
        };
        Self::from_parts(status, fields, body, trailers)
    }

    fn from_parts(
        status: u16,
        headers: Vec<(HeaderName, HeaderValue)>,
        body: Bytes,
        trailers: Vec<(HeaderName, HeaderValue)>,
    ) -> Result<Self, &'static str> {
        Ok(Self {
            status: StatusCode::from_u16(status).map_err(|_| "bad status")?,
            headers,
            body,
            trailers,
            origin: None,
        })
    }
}

/// A response and its encoding, made once ([`StoredResponse::encoded`]).
#[derive(Debug, Clone)]
pub struct Encoded {
    /// What [`StoredResponse::encode`] makes.
    pub bytes: Bytes,
    /// The response decoded from `bytes`: every part a slice of that one allocation.
    pub compact: StoredResponse,
}

impl Encoded {
    /// The header block alone, as [`StoredResponse::encode_headers`] makes it (a slice).
    pub fn header_block(&self) -> Bytes {
        let end = self.bytes.len() - self.compact.body.len();
        self.bytes.slice(self.compact.prefix_len()..end)
    }
}

fn put_block(out: &mut BytesMut, fields: &[(HeaderName, HeaderValue)]) {
    out.put_u16(fields.len() as u16);
    for (name, value) in fields {
        out.put_u16(name.as_str().len() as u16);
        out.put_slice(name.as_str().as_bytes());
        out.put_u32(value.len() as u32);
        out.put_slice(value.as_bytes());
    }
}

fn take(raw: &mut Bytes, n: usize) -> Result<Bytes, &'static str> {
    if raw.len() < n {
        return Err("truncated");
    }
    Ok(raw.split_to(n))
}

fn int(raw: &mut Bytes, n: usize) -> Result<usize, &'static str> {
    Ok(take(raw, n)?
        .iter()
        .fold(0usize, |acc, b| acc << 8 | *b as usize))
}

fn take_headers(raw: &mut Bytes) -> Result<Vec<(HeaderName, HeaderValue)>, &'static str> {
    let count = int(raw, 2)?;
    // Each header takes at least 6 bytes: a corrupt count does not reserve 65 535 slots.
    let mut headers = Vec::with_capacity(count.min(raw.len() / 6));
    for _ in 0..count {
        let n = int(raw, 2)?;
        let name = HeaderName::from_bytes(&take(raw, n)?).map_err(|_| "bad header name")?;
        let n = int(raw, 4)?;
        let value =
            HeaderValue::from_maybe_shared(take(raw, n)?).map_err(|_| "bad header value")?;
        headers.push((name, value));
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::super::stored::sample;
    use super::*;
    use http::HeaderMap;

    #[test]
    fn encoding_round_trips() {
        let s = sample();
        let encoded = s.encode();
        assert_eq!(encoded.len(), s.encoded_len());
        assert_eq!(StoredResponse::decode(encoded).unwrap(), s);
        let parts = StoredResponse::from_stored_parts(201, s.encode_headers(), s.body.clone());
        assert_eq!(parts.unwrap(), s);
        let once = s.encoded();
        assert_eq!((once.bytes.clone(), &once.compact), (s.encode(), &s));
        assert_eq!(once.header_block(), s.encode_headers());
    }

    /// Bytes as 0.1.0 to 0.4.0 stored them (status 201, `content-type: a/b`, body `hi`):
    /// every later release must decode them (docs/operations.md, Version policy).
    #[test]
    fn decodes_what_earlier_releases_stored() {
        let v1 = b"\x01\x00\xc9\x00\x01\x00\x0ccontent-type\x00\x00\x00\x03a/bhi";
        let r = StoredResponse::decode(Bytes::from_static(v1)).unwrap();
        assert_eq!(r.status, StatusCode::CREATED);
        assert_eq!(
            r.headers,
            [(http::header::CONTENT_TYPE, HeaderValue::from_static("a/b"))]
        );
        assert_eq!(r.body, "hi");
        assert_eq!(r.encode(), &v1[..], "the encoding of version 1 changed");
    }

    #[test]
    fn trailers_round_trip_in_version_3_and_only_then() {
        let mut t = HeaderMap::new();
        t.append("grpc-status", HeaderValue::from_static("0"));
        t.append("x-cost", HeaderValue::from_static("a"));
        t.append("x-cost", HeaderValue::from_static("b"));
        let s = sample().with_trailers(Some(&t));
        let encoded = s.encode();
        assert_eq!(
            (encoded[0], encoded.len()),
            (TRAILERS_VERSION, s.encoded_len())
        );
        assert_eq!(StoredResponse::decode(encoded).unwrap(), s);
        let parts = StoredResponse::from_stored_parts(201, s.encode_headers(), s.body.clone());
        assert_eq!(parts.unwrap(), s);
        assert_eq!(s.encoded().header_block(), s.encode_headers());
        let plain = sample().with_trailers(None);
        assert_eq!(plain.encode()[0], ENCODING_VERSION);
    }

    #[test]
    fn an_origin_is_version_4_around_the_response_and_outside_its_header_block() {
        let origin = TraceOrigin {
            trace_id: [7; 16],
            span_id: [9; 8],
        };
        let mut t = HeaderMap::new();
        t.append("grpc-status", HeaderValue::from_static("0"));
        for plain in [sample(), sample().with_trailers(Some(&t))] {
            let s = StoredResponse {
                origin: Some(origin),
                ..plain.clone()
            };
            let encoded = s.encode();
            assert_eq!(
                (encoded[0], encoded.len()),
                (ORIGIN_VERSION, s.encoded_len())
            );
            assert_eq!(&encoded[1..25], &origin.to_bytes()[..]);
            assert_eq!(
                encoded.slice(25..),
                plain.encode(),
                "then the response as before"
            );
            assert_eq!(StoredResponse::decode(encoded).unwrap(), s);
            // Postgres' header block is the response's, without the origin.
            assert_eq!(s.encoded().header_block(), plain.encode_headers());
            assert_eq!(s.encoded().compact, s);
        }
        let cut = Bytes::from_static(b"\x04\x07\x07");
        assert!(StoredResponse::decode(cut).is_err(), "a truncated origin");
    }

    #[test]
    fn decoding_refuses_garbage() {
        assert!(StoredResponse::decode(Bytes::from_static(b"")).is_err());
        assert!(StoredResponse::decode(Bytes::from_static(b"\x02\x00\xc8\x00\x00")).is_err());
        assert!(
            StoredResponse::decode(Bytes::from_static(b"\x01\x00\xc8\x00\x01\x00\x05ab")).is_err()
        );
    }
}
