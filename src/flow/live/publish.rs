//! The publisher of a live answer: writes it to the key's live stream in Redis for
//! the duplicates that join it, on any replica ([`crate::store::tiers::LiveWriter`]).
//!
//! Nothing is written until somebody asks: a duplicate told "in flight" marks the
//! record (`claim.lua`) and asks on the record's channel (`J`); the publisher looks once
//! [`FIRST_LOOK`] after the head (an answer that ends sooner never touches the stream)
//! and again whenever asked. From the first write on, every new piece is written,
//! batched while a write is in flight, in entries of at most [`ENTRY`] bytes, and the
//! stream is kept alive at least every third of `lock_ttl`; the end goes last.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::recording::{End, Recording};
use crate::idempotency::StoredResponse;
use crate::store::redis::live::Appended;
use crate::store::tiers::LiveWriter;

/// How long after the head the publisher first looks for joiners.
pub const FIRST_LOOK: Duration = Duration::from_millis(20);

/// Largest body piece in one stream entry (a joiner holds a few at a time).
pub const ENTRY: usize = 16 * 1024;

/// Most entries one write carries.
const PER_WRITE: usize = 64;

/// Publishes `recording` (whose head, as joiners get it, is `head`) until it ends,
/// the lease is not ours, or Redis fails (joiners then fall back to the record).
pub async fn publish(mut writer: LiveWriter, recording: Arc<Recording>, head: Bytes) {
    if !first_look(&recording).await {
        return;
    }
    // Listening before the first look: a duplicate that asks after it is heard.
    writer.listen().await;
    let mut publisher = Publisher {
        writer,
        recording,
        head,
        sent: 0,
        skip: 0,
        offset: 0,
        joined: false,
    };
    let Some(asking) = publisher.writer.asked() else {
        return;
    };
    // One wake-up armed at all times (re-armed as soon as it fires, before the look it
    // causes): the record channel's messages wake only who waits at that moment.
    let asked = asking.notified();
    tokio::pin!(asked);
    asked.as_mut().enable();
    let recording = publisher.recording.clone();
    let mut look = true;
    loop {
        let more = recording.more().notified();
        tokio::pin!(more);
        more.as_mut().enable();
        if publisher.joined || look {
            look = false;
            match publisher.write().await {
                Step::Again => continue,
                Step::Wait => {}
                Step::Done => return,
            }
        } else if publisher.recording.ended() {
            // Nobody asked before the end: they get the stored record.
            return;
        }
        tokio::select! {
            () = &mut asked => {
                look = true;
                asked.set(asking.notified());
                asked.as_mut().enable();
            }
            () = &mut more => {}
            () = tokio::time::sleep(publisher.writer.ttl() / 3) => {}
        }
    }
}

/// Waits [`FIRST_LOOK`]; false when the answer ended sooner (it is never published:
/// a duplicate gets the stored record, and nothing is subscribed to or written, as for
/// a unary gRPC call).
async fn first_look(recording: &Recording) -> bool {
    let first_look = tokio::time::sleep(FIRST_LOOK);
    tokio::pin!(first_look);
    loop {
        let more = recording.more().notified();
        tokio::pin!(more);
        more.as_mut().enable();
        if recording.ended() {
            return false;
        }
        tokio::select! {
            () = &mut first_look => return true,
            () = &mut more => {}
        }
    }
}

/// Where the publisher is in its recording.
struct Publisher {
    writer: LiveWriter,
    recording: Arc<Recording>,
    head: Bytes,
    /// Written: `sent` whole pieces, then `skip` bytes of the next; `offset` bytes in all.
    sent: usize,
    skip: usize,
    offset: u64,
    /// Whether the stream exists (somebody joined, the head is written).
    joined: bool,
}

/// What the publisher does after a write.
enum Step {
    /// More is ready: write again.
    Again,
    /// Wait for more, a request to join, or the time to keep the stream alive.
    Wait,
    /// The end is written, nobody joined before the end, or the stream is not ours.
    Done,
}

impl Publisher {
    /// Writes what is new (the head first, when the stream starts), if somebody joins.
    async fn write(&mut self) -> Step {
        let since = self.recording.since(self.sent);
        let (pieces, whole) = entries(&since.pieces, self.skip);
        let end = match (&since.end, since.over) {
            (_, true) | (Some(End::Aborted), _) => Some(None),
            (Some(End::Ended(trailers)), _) if whole => Some(Some(trailers_entry(trailers))),
            _ => None,
        };
        let finished = end.is_some() || since.over;
        if !self.joined && finished {
            return Step::Done;
        }
        let head = (!self.joined).then_some(&self.head);
        let end = end.as_ref().map(Option::as_ref);
        match self.writer.append(head, &pieces, self.offset, end).await {
            Ok(Appended::Written) => {
                self.joined = true;
                let written: usize = pieces.iter().map(Bytes::len).sum();
                let (whole_pieces, left) = advance(&since.pieces, self.skip, written);
                (self.sent, self.skip) = (self.sent + whole_pieces, left);
                self.offset += written as u64;
                match (finished, whole) {
                    (true, _) => Step::Done,
                    (false, false) => Step::Again,
                    (false, true) => Step::Wait,
                }
            }
            Ok(Appended::Nobody) => Step::Wait,
            Ok(Appended::NotOurs) => Step::Done,
            Err(e) => {
                tracing::debug!(error = %e,
                    "could not write the live stream; joiners fall back to the record");
                Step::Done
            }
        }
    }
}

/// The pieces (the first without its first `skip` bytes) cut to entries of at most
/// [`ENTRY`] bytes, at most [`PER_WRITE`] of them; and whether that is all of them.
fn entries(pieces: &[Bytes], skip: usize) -> (Vec<Bytes>, bool) {
    let mut out = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        let mut at = if i == 0 { skip } else { 0 };
        while at < piece.len() {
            if out.len() == PER_WRITE {
                return (out, false);
            }
            let end = (at + ENTRY).min(piece.len());
            out.push(piece.slice(at..end));
            at = end;
        }
    }
    (out, true)
}

/// Where writing `written` more bytes leaves the publisher in `pieces` (of which
/// `skip` bytes were written before): whole pieces done, and bytes of the next.
fn advance(pieces: &[Bytes], skip: usize, written: usize) -> (usize, usize) {
    let (mut left, mut whole) = (skip + written, 0);
    for piece in pieces {
        if piece.len() > left {
            break;
        }
        left -= piece.len();
        whole += 1;
    }
    (whole, left)
}

/// The end entry: the trailers as a stored response's trailer block.
fn trailers_entry(trailers: &Option<http::HeaderMap>) -> Bytes {
    let end =
        StoredResponse::from_upstream(http::StatusCode::OK, &http::HeaderMap::new(), Bytes::new())
            .with_trailers(trailers.as_ref());
    end.encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_answers_are_written_in_bounded_entries_without_gaps() {
        let first: Vec<u8> = (0..70 * ENTRY + 5).map(|i| i as u8).collect();
        let pieces = [Bytes::from(first), Bytes::from(vec![2u8; 10])];
        let (mut sent, mut skip, mut all) = (0, 0, Vec::new());
        loop {
            let (written, whole) = entries(&pieces[sent..], skip);
            assert!(written.iter().all(|e| e.len() <= ENTRY) && written.len() <= PER_WRITE);
            let n: usize = written.iter().map(Bytes::len).sum();
            written.iter().for_each(|e| all.extend_from_slice(e));
            let (w, left) = advance(&pieces[sent..], skip, n);
            (sent, skip) = (sent + w, left);
            if whole {
                break;
            }
        }
        assert_eq!(all, [pieces[0].as_ref(), pieces[1].as_ref()].concat());
        assert_eq!((sent, skip), (2, 0));
    }
}
