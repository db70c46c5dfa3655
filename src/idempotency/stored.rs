//! A completed key's record as the gateway keeps it: [`StoredResponse`] (status,
//! end-to-end headers in order, body, trailers), made from the upstream's answer and
//! trimmed by the route's policy. Its wire encoding is in [`super::encoding`]; the
//! response sent from it (a first execution's and every replay's) in [`super::replay`].

use bytes::Bytes;
use http::header::{DATE, SERVER};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};

use crate::config::ReplayOmit;
use crate::proxy::headers::is_hop_by_hop;

/// Most headers a record holds: the encoding counts them in a u16.
pub(super) const MAX_HEADERS: usize = u16::MAX as usize;

/// Recorded fields (headers or trailers, in order) as a map to send.
pub fn header_map(fields: &[(HeaderName, HeaderValue)]) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(fields.len());
    for (name, value) in fields {
        map.append(name.clone(), value.clone());
    }
    map
}

/// The trace and span of the execution that produced a response (`[tracing]`), kept
/// with it so that a replay's span can link to that execution; never sent to a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceOrigin {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
}

impl From<([u8; 16], [u8; 8])> for TraceOrigin {
    fn from((trace_id, span_id): ([u8; 16], [u8; 8])) -> Self {
        Self { trace_id, span_id }
    }
}

impl TraceOrigin {
    /// Its 24 bytes, trace id first: as the encoding and Postgres keep them.
    pub fn to_bytes(self) -> [u8; 24] {
        let mut out = [0; 24];
        out[..16].copy_from_slice(&self.trace_id);
        out[16..].copy_from_slice(&self.span_id);
        out
    }

    pub fn from_bytes(raw: &[u8]) -> Option<Self> {
        Some(Self {
            trace_id: raw.get(..16)?.try_into().ok()?,
            span_id: raw.get(16..24)?.try_into().ok()?,
        })
    }
}

/// A response as recorded for a key: status, end-to-end headers, body, trailers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    pub status: StatusCode,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
    /// Sent after the body, in order (a gRPC call's `grpc-status` and the rest).
    pub trailers: Vec<(HeaderName, HeaderValue)>,
    /// The execution that produced it, where its trace was exported.
    pub origin: Option<TraceOrigin>,
}

impl StoredResponse {
    /// Keeps what is worth replaying of an upstream response: end-to-end headers
    /// (no hop-by-hop, no `Date` or `Server`), in their original order, at most
    /// 65 535 of them (what the encoding holds), so the first answer is what replays send.
    pub fn from_upstream(status: StatusCode, headers: &HeaderMap, body: Bytes) -> Self {
        let headers = headers
            .iter()
            .filter(|(name, _)| **name != DATE && **name != SERVER && !is_hop_by_hop(name, headers))
            .take(MAX_HEADERS)
            .map(|(n, v)| (n.clone(), v.clone()))
            .collect();
        Self {
            status,
            headers,
            body,
            trailers: Vec::new(),
            origin: None,
        }
    }

    /// Adds the upstream's trailers (all of them, in order, at most 65 535).
    pub fn with_trailers(mut self, trailers: Option<&HeaderMap>) -> Self {
        if let Some(trailers) = trailers {
            self.trailers = (trailers.iter())
                .take(MAX_HEADERS)
                .map(|(n, v)| (n.clone(), v.clone()))
                .collect();
        }
        self
    }

    /// Drops the headers the route keeps out of what it stores (`Set-Cookie` unless it
    /// replays cookies, `replay_omit_headers`): what the route stores. In place: no
    /// allocation.
    pub fn omit(&mut self, omit: &ReplayOmit) {
        if !omit.is_empty() {
            self.headers.retain(|(name, _)| !omit.omits(name));
        }
    }
}

/// A response with cookies, hop-by-hop and per-exchange headers, for the tests of the
/// record, its encoding and its replay.
#[cfg(test)]
pub(crate) fn sample() -> StoredResponse {
    let mut h = HeaderMap::new();
    h.append("content-type", HeaderValue::from_static("application/json"));
    h.append("set-cookie", HeaderValue::from_static("a=1"));
    h.append("set-cookie", HeaderValue::from_static("b=2"));
    h.append(
        "date",
        HeaderValue::from_static("Sun, 22 Nov 2026 10:00:00 GMT"),
    );
    h.append("server", HeaderValue::from_static("upstream/1.0"));
    h.append("connection", HeaderValue::from_static("close, x-private"));
    h.append("x-private", HeaderValue::from_static("hop"));
    h.append("transfer-encoding", HeaderValue::from_static("chunked"));
    h.append("x-request-cost", HeaderValue::from_static("7"));
    StoredResponse::from_upstream(StatusCode::CREATED, &h, Bytes::from_static(b"{\"id\":1}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_end_to_end_headers_in_order() {
        let stored = sample();
        let names: Vec<&str> = stored.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["content-type", "set-cookie", "set-cookie", "x-request-cost"]
        );
    }
}
