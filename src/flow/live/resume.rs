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

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName};

use crate::budget::{ByteBudget, Charge, OverBudget};
use crate::idempotency::StoredResponse;

/// `Last-Event-ID`, as EventSource sends it when it reconnects.
pub const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// Where a retry resumes an event stream: after the event with `id`.
pub struct Resume {
    id: Bytes,
    /// Live: what came before the event was found (bounded by the answer's limit).
    held: Option<BytesMut>,
    /// Live: how far `held` is read, so that each byte is scanned once.
    scan: Scan,
    /// Live: pays for `held` (the connection's share of `server.buffer_budget`).
    charge: Option<Charge>,
}

/// How far an event stream has been read for an id.
#[derive(Default)]
struct Scan {
    /// Where the next line starts.
    at: usize,
    /// Up to where no line end follows `at`.
    searched: usize,
    /// The event being read named the id.
    named: bool,
}

impl Resume {
    /// The resume point a request asks for, if it sends `Last-Event-ID`; what a live
    /// answer holds until then is charged to `budget` (the request's connection's).
    pub fn from_request(headers: &HeaderMap, budget: Option<&Arc<ByteBudget>>) -> Option<Self> {
        let id = headers.get(LAST_EVENT_ID)?;
        Some(Self {
            id: Bytes::copy_from_slice(id.as_bytes()),
            held: Some(BytesMut::new()),
            scan: Scan::default(),
            charge: budget.map(|budget| budget.take_anyway(0)),
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

    /// Live: what to send of the next piece (nothing until the event has passed); each
    /// byte held is scanned once, and charged to the budget while held (`OverBudget`:
    /// the budget is spent, the joiner is cut).
    pub fn feed(&mut self, piece: Bytes) -> Result<Option<Bytes>, OverBudget> {
        let Some(held) = self.held.as_mut() else {
            return Ok(Some(piece));
        };
        if let Some(charge) = self.charge.as_mut() {
            if !charge.try_grow(piece.len() as u64) {
                return Err(OverBudget);
            }
        }
        held.extend_from_slice(&piece);
        let Some(at) = self.scan.after_event(held, &self.id) else {
            return Ok(None);
        };
        let rest = self.held.take().map(|held| held.freeze().slice(at..));
        self.charge = None;
        Ok(rest.filter(|rest| !rest.is_empty()))
    }

    /// Live, at the end: what was held when the event never came (the whole answer).
    pub fn finish(&mut self) -> Option<Bytes> {
        let held = self.held.take()?;
        self.charge = None;
        (!held.is_empty()).then(|| held.freeze())
    }
}

/// The offset just after the first complete event whose `id` field is `id`.
fn after_event(body: &[u8], id: &[u8]) -> Option<usize> {
    Scan::default().after_event(body, id)
}

impl Scan {
    /// Reads `body` on from where the last call stopped: the offset just after the
    /// first complete event whose `id` field is `id`, or `None` (yet).
    fn after_event(&mut self, body: &[u8], id: &[u8]) -> Option<usize> {
        while self.at < body.len() {
            let Some((line, next)) = line_at(body, self.at, self.searched) else {
                // The line is not ended yet: the next call searches on from here.
                self.searched = body.len().saturating_sub(1).max(self.at);
                return None;
            };
            if line.is_empty() {
                if self.named {
                    self.at = next;
                    return Some(next);
                }
            } else if let Some(value) = field(line, b"id") {
                self.named = value == id;
            }
            self.at = next;
            self.searched = next;
        }
        None
    }
}

/// The line starting at `at` (without its end) and where the next begins, its end
/// searched for from `from` (no line end lies between `at` and it); `None` for a line
/// not ended yet.
fn line_at(body: &[u8], at: usize, from: usize) -> Option<(&[u8], usize)> {
    let rest = &body[at..];
    let skip = from.saturating_sub(at);
    let end = skip
        + rest[skip..]
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')?;
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

    fn resume_at(id: &'static [u8], budget: Option<&Arc<ByteBudget>>) -> Resume {
        let mut headers = HeaderMap::new();
        headers.insert(LAST_EVENT_ID, http::HeaderValue::from_static("x"));
        let mut resume = Resume::from_request(&headers, budget).unwrap();
        resume.id = Bytes::from_static(id);
        resume
    }

    #[test]
    fn every_split_of_the_stream_resumes_at_the_same_place() {
        let whole = &STREAM[after_event(STREAM, b"2").unwrap()..];
        for size in 1..STREAM.len() {
            let mut resume = resume_at(b"2", None);
            let mut sent = Vec::new();
            for piece in STREAM.chunks(size) {
                let fed = resume.feed(Bytes::copy_from_slice(piece)).unwrap();
                sent.extend_from_slice(&fed.unwrap_or_default());
            }
            assert_eq!(sent, whole, "pieces of {size} bytes");
        }
    }

    #[test]
    fn a_long_line_in_small_pieces_is_scanned_once() {
        // One byte at a time, 200 KB without a line end: each byte is looked at once
        // (a rescan from the line's start would take 2 * 10^10 steps here).
        let mut resume = resume_at(b"2", None);
        for _ in 0..200_000 {
            assert_eq!(resume.feed(Bytes::from_static(b"a")).unwrap(), None);
        }
        assert_eq!(
            resume.scan.searched, 199_999,
            "where the next search starts"
        );
        let rest = resume.feed(Bytes::from_static(b"\n\nid: 2\n\nz")).unwrap();
        assert_eq!(rest.unwrap(), "z");
    }

    #[test]
    fn what_is_held_is_charged_to_the_budget_and_freed_once_resumed() {
        let budget = Arc::new(ByteBudget::new(64));
        let mut resume = resume_at(b"2", Some(&budget));
        assert_eq!(resume.feed(Bytes::from_static(b"id: 1\n\n")).unwrap(), None);
        assert_eq!(budget.used(), 7);
        assert!(
            resume.feed(Bytes::from(vec![b'a'; 60])).is_err(),
            "over the budget"
        );
        let mut resume = resume_at(b"2", Some(&budget));
        let rest = resume.feed(Bytes::from_static(b"id: 2\n\nb")).unwrap();
        assert_eq!(rest.unwrap(), "b");
        drop(resume);
        assert_eq!(budget.used(), 7, "only the first resume holds its bytes");
    }

    #[test]
    fn live_pieces_are_held_until_the_event_has_passed() {
        let mut resume = resume_at(b"2", None);
        let (a, b) = STREAM.split_at(20);
        assert_eq!(resume.feed(Bytes::copy_from_slice(a)).unwrap(), None);
        let rest = resume.feed(Bytes::copy_from_slice(b)).unwrap().unwrap();
        assert_eq!(&rest[..], &STREAM[after_event(STREAM, b"2").unwrap()..]);
        assert_eq!(resume.feed(Bytes::from_static(b"x")).unwrap().unwrap(), "x");
        assert_eq!(resume.finish(), None);

        let mut never = resume_at(b"9", None);
        assert_eq!(never.feed(Bytes::from_static(STREAM)).unwrap(), None);
        assert_eq!(never.finish().unwrap(), STREAM, "the whole answer");
    }
}
