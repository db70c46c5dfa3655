//! The resendable request: what a route with `completer = true` keeps with its durable lease,
//! so that the completer can send the request again if its replica dies mid-request
//! and its client never retries (docs/completer.md).
//!
//! It is the request as the gateway received it once its hop-by-hop and gateway-owned
//! headers were stripped (what forwarding starts from): method, path and query, the
//! end-to-end headers in order (the idempotency key among them), the client's address
//! (for the forwarding headers), and the body (within `server.max_request_body`). It is
//! sealed like a stored response under `[encryption]`, with a label of its own
//! ([`super::sealed`]): one cannot be opened as the other.
//!
//! Encoding (version 1): `0x4b` (`K`), `0x01`, method length (u8), method, target length
//! (u16 BE), path and query, the peer address (4: four bytes, 6: sixteen), header count
//! (u16 BE), then per header its name length (u16 BE), name, value length (u32 BE),
//! value; the rest is the body.

use std::net::IpAddr;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri};

const MAGIC: u8 = b'K';
/// Version of this encoding.
pub const RESENDABLE_VERSION: u8 = 1;

/// A request kept for the completer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResendableRequest {
    pub method: Method,
    /// The path and query the client sent (canonical).
    pub target: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub peer: IpAddr,
    pub body: Bytes,
}

impl ResendableRequest {
    /// What the completer needs of a request about to be forwarded.
    pub fn new(parts: &Parts, body: &Bytes, peer: IpAddr) -> Self {
        let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        Self {
            method: parts.method.clone(),
            target: target.to_string(),
            headers: (parts.headers.iter())
                .take(u16::MAX as usize)
                .map(|(n, v)| (n.clone(), v.clone()))
                .collect(),
            peer,
            body: body.clone(),
        }
    }

    pub fn encode(&self) -> Bytes {
        let headers: usize = (self.headers.iter())
            .map(|(n, v)| 6 + n.as_str().len() + v.len())
            .sum();
        let mut out = BytesMut::with_capacity(
            24 + self.method.as_str().len() + self.target.len() + headers + self.body.len(),
        );
        out.put_u8(MAGIC);
        out.put_u8(RESENDABLE_VERSION);
        let method = self.method.as_str().as_bytes();
        out.put_u8(method.len().min(255) as u8);
        out.put_slice(&method[..method.len().min(255)]);
        let target = &self.target.as_bytes()[..self.target.len().min(u16::MAX as usize)];
        out.put_u16(target.len() as u16);
        out.put_slice(target);
        match self.peer {
            IpAddr::V4(ip) => {
                out.put_u8(4);
                out.put_slice(&ip.octets());
            }
            IpAddr::V6(ip) => {
                out.put_u8(6);
                out.put_slice(&ip.octets());
            }
        }
        out.put_u16(self.headers.len() as u16);
        for (name, value) in &self.headers {
            out.put_u16(name.as_str().len() as u16);
            out.put_slice(name.as_str().as_bytes());
            out.put_u32(value.len() as u32);
            out.put_slice(value.as_bytes());
        }
        out.put_slice(&self.body);
        out.freeze()
    }

    pub fn decode(mut raw: Bytes) -> Result<Self, &'static str> {
        if take(&mut raw, 2)?[..] != [MAGIC, RESENDABLE_VERSION] {
            return Err("not a resendable request");
        }
        let len = usize::from(take(&mut raw, 1)?[0]);
        let method = Method::from_bytes(&take(&mut raw, len)?).map_err(|_| "bad method")?;
        let len = take(&mut raw, 2)?.get_u16() as usize;
        let target = String::from_utf8(take(&mut raw, len)?.to_vec()).map_err(|_| "bad target")?;
        let peer = match take(&mut raw, 1)?[0] {
            4 => IpAddr::from(<[u8; 4]>::try_from(&take(&mut raw, 4)?[..]).unwrap_or_default()),
            6 => IpAddr::from(<[u8; 16]>::try_from(&take(&mut raw, 16)?[..]).unwrap_or_default()),
            _ => return Err("bad peer address"),
        };
        let count = take(&mut raw, 2)?.get_u16();
        let mut headers = Vec::with_capacity(usize::from(count));
        for _ in 0..count {
            let len = take(&mut raw, 2)?.get_u16() as usize;
            let name = HeaderName::from_bytes(&take(&mut raw, len)?).map_err(|_| "bad name")?;
            let len = take(&mut raw, 4)?.get_u32() as usize;
            let value = HeaderValue::from_maybe_shared(take(&mut raw, len)?)
                .map_err(|_| "bad header value")?;
            headers.push((name, value));
        }
        Ok(Self {
            method,
            target,
            headers,
            peer,
            body: raw,
        })
    }

    /// The request's head again, as forwarding takes it, and its body.
    pub fn into_parts(self) -> Result<(Parts, Bytes, IpAddr), &'static str> {
        let uri: Uri = self.target.parse().map_err(|_| "bad target")?;
        let mut headers = HeaderMap::with_capacity(self.headers.len());
        for (name, value) in self.headers {
            headers.append(name, value);
        }
        let (mut parts, ()) = Request::builder()
            .method(self.method)
            .uri(uri)
            .body(())
            .map_err(|_| "bad request head")?
            .into_parts();
        parts.headers = headers;
        Ok((parts, self.body, self.peer))
    }
}

fn take(raw: &mut Bytes, n: usize) -> Result<Bytes, &'static str> {
    if raw.len() < n {
        return Err("resendable request truncated");
    }
    Ok(raw.split_to(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_garbage() {
        let request = Request::builder()
            .method("POST")
            .uri("/v1/payments?x=1")
            .header("idempotency-key", "k1")
            .header("x-a", "1")
            .header("x-a", "2")
            .body(())
            .unwrap();
        let (parts, ()) = request.into_parts();
        for peer in ["10.0.0.7", "::1"] {
            let kept =
                ResendableRequest::new(&parts, &Bytes::from_static(b"{}"), peer.parse().unwrap());
            let back = ResendableRequest::decode(kept.encode()).unwrap();
            assert_eq!(back, kept);
            let (p, body, ip) = back.into_parts().unwrap();
            assert_eq!(p.uri, "/v1/payments?x=1");
            assert_eq!(p.headers.get_all("x-a").iter().count(), 2);
            assert_eq!((&body[..], ip.to_string()), (&b"{}"[..], peer.to_string()));
        }
        let encoded =
            ResendableRequest::new(&parts, &Bytes::new(), "10.0.0.1".parse().unwrap()).encode();
        for cut in 0..encoded.len() - 1 {
            // Every prefix short of the headers fails; none panics.
            let _ = ResendableRequest::decode(encoded.slice(..cut));
        }
        assert!(ResendableRequest::decode(Bytes::from_static(b"\x01\x00\xc8")).is_err());
    }
}
