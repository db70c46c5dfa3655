//! The live stream of a keyed answer across replicas, as the flow sees it: the lease
//! holder's [`LiveWriter`] and a joining duplicate's [`LiveReader`] (the stream's
//! Redis side: [`crate::store::redis::live`]). Entries are sealed with `[encryption]`;
//! each piece of the body carries its offset, so a reader that missed or reordered a
//! piece fails instead of answering other bytes.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::sync::Notify;

use super::super::lease::Lease;
use super::super::redis::live::{Appended, Entry};
use super::super::redis::live_read::LiveRead;
use super::super::redis::waiters::{Waiters, Watch, RECHECK};
use super::super::{RedisStore, StoreError};
use super::Stores;
use crate::idempotency::{Binding, Home, Sealing};

/// Most entries one read takes: a joiner holds at most this many pieces.
const READ_BATCH: u64 = 8;

/// The lease holder's side of a live stream.
pub struct LiveWriter {
    redis: RedisStore,
    key: String,
    token: String,
    /// The lease's `lock_ttl`. The stream lives two thirds of it after each write and is
    /// written (or kept alive) every third: a writer that dies leaves a stream that
    /// expires before its lease, so the key's next execution never finds it.
    ttl: Duration,
    sealing: Sealing,
    at: Binding,
    waiters: Arc<Waiters>,
    /// Woken when a duplicate asks to join (`J` on the record's channel), once
    /// [`listen`](LiveWriter::listen)ing.
    watch: Option<Watch>,
}

/// A joining duplicate's side of a live stream.
pub struct LiveReader {
    redis: RedisStore,
    key: String,
    sealing: Sealing,
    at: Binding,
    /// Woken by every write (`L` on the record's channel).
    watch: Watch,
    /// The execution whose stream this is (as `lua/live_read.lua` names it): read only
    /// while it holds or completed the record.
    owner: String,
    /// The id of the last entry read.
    last: String,
    /// Body bytes read so far: the offset the next piece must carry.
    offset: u64,
}

/// What a [`LiveReader`] read.
pub enum Read {
    /// The next entries (body pieces without their offsets).
    Entries(Vec<Entry>),
    /// The stream is gone (completed and expired, or its writer died).
    Gone,
}

/// Why a live stream could not be read on.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("a live stream entry does not open: {0}")]
    Unreadable(#[from] crate::idempotency::Unreadable),
    #[error("a live stream piece is out of order (at {got}, expected {expected})")]
    OutOfOrder { got: u64, expected: u64 },
}

impl Stores {
    /// The writer of `lease`'s live stream, when duplicates can join it: some route lets
    /// duplicates wait (the waiters' subscription exists) and the lease is in Redis.
    pub fn live_writer(&self, lease: &Lease) -> Option<LiveWriter> {
        let waiters = self.0.waiters.as_ref()?;
        if !matches!(lease.home, Home::Redis { .. }) {
            return None;
        }
        Some(LiveWriter {
            waiters: waiters.clone(),
            redis: self.0.redis.clone(),
            key: lease.redis_key.clone(),
            token: lease.token.clone(),
            ttl: lease.lock_ttl,
            sealing: self.0.sealing.clone(),
            at: binding(lease),
            watch: None,
        })
    }

    /// The reader of the live stream of the record `key`, from its start, if it exists:
    /// with its head (the first entry).
    pub(super) async fn live_reader(
        &self,
        key: &str,
        at: Binding,
    ) -> Result<Option<(Bytes, LiveReader)>, StoreError> {
        let Some(waiters) = self.0.waiters.as_ref() else {
            return Ok(None);
        };
        let LiveRead::Read { owner, entries, .. } =
            self.0.redis.live_read(key, None, None, 1).await?
        else {
            return Ok(None);
        };
        let Some((id, Entry::Head(head))) = entries.into_iter().next() else {
            return Ok(None);
        };
        let Ok(head) = self.0.sealing.open_live(head, at) else {
            return Ok(None);
        };
        // Registered after the head was read: the reader reads before it first waits,
        // so nothing written in between is missed.
        let watch = waiters.watch(self.0.redis.channel(key)).await;
        let reader = LiveReader {
            redis: self.0.redis.clone(),
            key: key.to_string(),
            sealing: self.0.sealing.clone(),
            at,
            watch,
            owner,
            last: id,
            offset: 0,
        };
        Ok(Some((head, reader)))
    }
}

fn binding(lease: &Lease) -> Binding {
    Binding {
        scope: lease.scope,
        record: lease.record,
    }
}

impl LiveWriter {
    /// Starts listening for duplicates that ask to join (in a cluster, subscribes to
    /// the record's channel).
    pub async fn listen(&mut self) {
        let channel = self.redis.channel(&self.key);
        self.watch = Some(self.waiters.watch(channel).await);
    }

    /// Woken when a duplicate asks to join, once listening. Enable the `notified()`
    /// before [`append`](Self::append), so that a request between the two is not missed.
    pub fn asked(&self) -> Option<Arc<Notify>> {
        self.watch.as_ref().map(Watch::notify_handle)
    }

    /// The lease's `lock_ttl`: the writer writes (or refreshes) at least every third of it.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Appends the answer's head, body pieces starting at body offset `offset`, and
    /// its end (`Some(Some(trailers))` ended, `Some(None)` aborted), when somebody
    /// joins; nothing to append only keeps the stream alive.
    pub async fn append(
        &self,
        head: Option<&Bytes>,
        pieces: &[Bytes],
        mut offset: u64,
        end: Option<Option<&Bytes>>,
    ) -> Result<Appended, StoreError> {
        let seal = |b: &Bytes| self.sealing.seal_live(b, self.at);
        let mut entries = Vec::with_capacity(pieces.len() + 2);
        if let Some(head) = head {
            entries.push(Entry::Head(seal(head)));
        }
        for piece in pieces {
            let mut at = BytesMut::with_capacity(8 + piece.len());
            at.put_u64(offset);
            at.put_slice(piece);
            offset += piece.len() as u64;
            entries.push(Entry::Data(seal(&at.freeze())));
        }
        match end {
            Some(Some(trailers)) => entries.push(Entry::End(seal(trailers))),
            Some(None) => entries.push(Entry::Aborted),
            None => {}
        }
        (self.redis)
            .live_append(&self.key, &self.token, self.ttl * 2 / 3, &entries)
            .await
    }
}

impl LiveReader {
    /// The next entries, waiting for them (woken by the writer's `L`, and reading again
    /// every [`RECHECK`]): `Gone` once the stream is not its execution's any more, or
    /// its execution completed without writing more.
    pub async fn next(&mut self) -> Result<Read, LiveError> {
        let mut waited = false;
        loop {
            let notify = self.watch.notify_handle();
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let read =
                (self.redis).live_read(&self.key, Some(&self.owner), Some(&self.last), READ_BATCH);
            let (completed, read) = match read.await? {
                LiveRead::Gone => return Ok(Read::Gone),
                LiveRead::Read {
                    completed, entries, ..
                } => (completed, entries),
            };
            if let Some((id, _)) = read.last() {
                self.last = id.clone();
                let mut entries = Vec::with_capacity(read.len());
                for (_, entry) in read {
                    entries.push(self.open(entry)?);
                }
                return Ok(Read::Entries(entries));
            }
            // Woken with nothing new (another duplicate asked), or nothing for a while,
            // and the key completed without its end written: the record tells the rest.
            // (A stream that is gone, or no longer its execution's, reads `Gone`.)
            if waited && completed {
                return Ok(Read::Gone);
            }
            waited = true;
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep(RECHECK) => self.watch.refresh().await,
            }
        }
    }

    /// Woken by every write to the stream and every completion or release of the key.
    pub fn wake(&self) -> Arc<Notify> {
        self.watch.notify_handle()
    }

    /// Body bytes read so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn open(&mut self, entry: Entry) -> Result<Entry, LiveError> {
        Ok(match entry {
            Entry::Head(raw) => Entry::Head(self.sealing.open_live(raw, self.at)?),
            Entry::End(raw) => Entry::End(self.sealing.open_live(raw, self.at)?),
            Entry::Aborted => Entry::Aborted,
            Entry::Data(raw) => {
                let mut piece = self.sealing.open_live(raw, self.at)?;
                if piece.len() < 8 {
                    let expected = self.offset;
                    return Err(LiveError::OutOfOrder { got: 0, expected });
                }
                let got = piece.get_u64();
                if got != self.offset {
                    let expected = self.offset;
                    return Err(LiveError::OutOfOrder { got, expected });
                }
                self.offset += piece.len() as u64;
                Entry::Data(piece)
            }
        })
    }
}
