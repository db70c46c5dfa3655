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
    writer.listen().await;
    tokio::time::sleep(FIRST_LOOK).await;
    // Written: `sent` whole pieces, then `skip` bytes of the next; `offset` bytes in all.
    let (mut sent, mut skip, mut offset) = (0usize, 0usize, 0u64);
    let (mut joined, mut look) = (false, true);
    loop {
        let Some(asked) = writer.asked() else { return };
        let (asked, more) = (asked.notified(), recording.more().notified());
        tokio::pin!(asked, more);
        asked.as_mut().enable();
        more.as_mut().enable();
        let since = recording.since(sent);
        let (pieces, whole) = entries(&since.pieces, skip);
        let end = match (&since.end, since.over) {
            (_, true) | (Some(End::Aborted), _) => Some(None),
            (Some(End::Ended(trailers)), _) if whole => Some(Some(trailers_entry(trailers))),
            _ => None,
        };
        let finished = end.is_some() || since.over;
        if joined || look {
            look = false;
            let head = (!joined).then_some(&head);
            let end = end.as_ref().map(Option::as_ref);
            match writer.append(head, &pieces, offset, end).await {
                Ok(Appended::Written) => {
                    joined = true;
                    let written: usize = pieces.iter().map(Bytes::len).sum();
                    let (whole_pieces, left) = advance(&since.pieces, skip, written);
                    (sent, skip) = (sent + whole_pieces, left);
                    offset += written as u64;
                    if finished {
                        return;
                    }
                    if !whole {
                        continue;
                    }
                }
                Ok(Appended::Nobody) if !finished => {}
                Ok(_) => return,
                Err(e) => {
                    tracing::debug!(error = %e, "could not write the live stream; joiners fall back to the record");
                    return;
                }
            }
        } else if finished {
            return;
        }
        tokio::select! {
            () = &mut asked => look = true,
            () = &mut more => {}
            () = tokio::time::sleep(writer.ttl() / 3) => {}
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
    let end = StoredResponse::from_upstream(http::StatusCode::OK, &http::HeaderMap::new(), Bytes::new())
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
