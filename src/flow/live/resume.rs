//! SSE resume: a retry that sends `Last-Event-ID` for an answer that is an event
//! stream (`text/event-stream`) gets only the events after the one with that id,
//! whether it replays the stored answer ([`Resume::stored`]) or joins it live
//! ([`Resume::feed`]).
//!
//! Events end at a blank line (`\n\n`, `\r\n\r\n` or `\r\r`, as the SSE format allows);
//! an event's `id:` field names it. The answer resumes after the first event whose id is
//! the one sent. An id the answer does not hold resumes nothing: the whole answer is
//! sent, as without the header (the client has seen an id the gateway never recorded,
//! so it cannot tell which events it missed). Nothing but the body changes: status,
//! headers and trailers are the stored ones.

use bytes::{Bytes, BytesMut};
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName};

use crate::idempotency::StoredResponse;

/// `Last-Event-ID`, as EventSource sends it when it reconnects.
pub const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// Where a retry resumes an event stream: after the event with `id`.
pub struct Resume {
    id: Bytes,
    /// Live: what came before the event was found (bounded by the answer's limit).
    held: Option<BytesMut>,
}

impl Resume {
    /// The resume point a request asks for, if it sends `Last-Event-ID`.
    pub fn from_request(headers: &HeaderMap) -> Option<Self> {
        let id = headers.get(LAST_EVENT_ID)?;
        Some(Self {
            id: Bytes::copy_from_slice(id.as_bytes()),
            held: Some(BytesMut::new()),
        })
    }

    /// Whether an answer with these headers is an event stream (the only kind resumed).
    pub fn applies(headers: impl IntoIterator<Item = (impl AsRef<str>, impl AsRef<[u8]>)>) -> bool {
        headers.into_iter().any(|(name, value)| {
            name.as_ref().eq_ignore_ascii_case(CONTENT_TYPE.as_str())
                && value.as_ref().starts_with(b"text/event-stream")
        })
    }

    /// The stored answer from after the event, when it is an event stream holding it.
    pub fn stored(&self, stored: &StoredResponse) -> Option<StoredResponse> {
        let headers = stored
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_bytes()));
        if !Self::applies(headers) {
            return None;
        }
        let at = after_event(&stored.body, &self.id)?;
        let mut resumed = stored.clone();
        resumed.body = stored.body.slice(at..);
        // A length the upstream sent is the whole answer's, not this part's.
        resumed
            .headers
            .retain(|(name, _)| name != http::header::CONTENT_LENGTH);
        Some(resumed)
    }

    /// Live: what to send of the next piece (nothing until the event has passed).
    pub fn feed(&mut self, piece: Bytes) -> Option<Bytes> {
        let Some(held) = self.held.as_mut() else {
            return Some(piece);
        };
        held.extend_from_slice(&piece);
        let at = after_event(held, &self.id)?;
        let rest = self.held.take()?.freeze().slice(at..);
        (!rest.is_empty()).then_some(rest)
    }

    /// Live, at the end: what was held when the event never came (the whole answer).
    pub fn finish(&mut self) -> Option<Bytes> {
        let held = self.held.take()?;
        (!held.is_empty()).then(|| held.freeze())
    }
}

/// The offset just after the first complete event whose `id` field is `id`.
fn after_event(body: &[u8], id: &[u8]) -> Option<usize> {
    let (mut at, mut event_id): (usize, Option<&[u8]>) = (0, None);
    while at < body.len() {
        let (line, next) = line_at(body, at)?;
        if line.is_empty() {
            if event_id == Some(id) {
                return Some(next);
            }
            event_id = None;
        } else if let Some(value) = field(line, b"id") {
            event_id = Some(value);
        }
        at = next;
    }
    None
}

/// The line starting at `at` (without its end) and where the next begins; `None` for
/// a line not ended yet.
fn line_at(body: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = &body[at..];
    let end = rest.iter().position(|&b| b == b'\n' || b == b'\r')?;
    let next = match (rest[end], rest.get(end + 1)) {
        (b'\r', Some(b'\n')) => end + 2,
        (b'\r', None) => return None,
        _ => end + 1,
    };
    Some((&rest[..end], at + next))
}

/// The value of `line` when it is the field `name` (one leading space dropped).
fn field<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let value = line.strip_prefix(name)?;
    if value.is_empty() {
        return Some(value);
    }
    let value = value.strip_prefix(b":")?;
    Some(value.strip_prefix(b" ").unwrap_or(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &[u8] = b"id: 1\ndata: a\n\nid: 2\ndata: b\n\n: note\n\nid: 3\r\ndata: c\r\n\r\n";

    #[test]
    fn resumes_after_the_event_with_the_id() {
        let at = after_event(STREAM, b"2").unwrap();
        assert_eq!(&STREAM[at..], b": note\n\nid: 3\r\ndata: c\r\n\r\n");
        assert_eq!(after_event(STREAM, b"3"), Some(STREAM.len()));
        assert_eq!(after_event(STREAM, b"9"), None, "an id never sent");
        assert_eq!(
            after_event(b"id: 1\ndata: a\n", b"1"),
            None,
            "the event is not over"
        );
        assert_eq!(after_event(b"idx: 1\n\n", b"1"), None, "another field");
    }

    #[test]
    fn live_pieces_are_held_until_the_event_has_passed() {
        let mut resume = Resume {
            id: Bytes::from_static(b"2"),
            held: Some(BytesMut::new()),
        };
        let (a, b) = STREAM.split_at(20);
        assert_eq!(resume.feed(Bytes::copy_from_slice(a)), None);
        let rest = resume.feed(Bytes::copy_from_slice(b)).unwrap();
        assert_eq!(&rest[..], &STREAM[after_event(STREAM, b"2").unwrap()..]);
        assert_eq!(resume.feed(Bytes::from_static(b"x")).unwrap(), "x");
        assert_eq!(resume.finish(), None);

        let mut never = Resume {
            id: Bytes::from_static(b"9"),
            held: Some(BytesMut::new()),
        };
        assert_eq!(never.feed(Bytes::from_static(STREAM)), None);
        assert_eq!(never.finish().unwrap(), STREAM, "the whole answer");
    }
}
