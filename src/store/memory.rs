//! The in-process replay cache: completed records this replica has seen, so that a
//! replay is answered without a Redis round trip.
//!
//! Safe because a completed record never changes until it expires: the completion
//! script and the Postgres upsert only write a free, leased-by-the-same-token or
//! expired record. Each entry expires with its record (the remaining TTL Redis or
//! Postgres reported), and at most `replay_cache.max_age` after it was cached, which
//! bounds how long an admin invalidation that this replica missed can go unnoticed
//! (invalidations are published to every replica). Entries are weighed by their
//! stored size, up to `replay_cache.max_bytes`, and hold a compact copy of the response
//! (never a slice of a connection's read buffer), so that weight is what they occupy.
//!
//! Every [`ReplayCache::clear`] starts a new *view* (a failover, a breaker that opened
//! or closed, a missed invalidation): a record seen before it, in another view of the
//! tiers, is not cached after it ([`ReplayCache::view`], checked on insert). A response a
//! replica completed in Postgres while its breaker was open would otherwise stay cached
//! past the heal, though Redis, the authority again, holds another one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{HeaderName, HeaderValue};
use quick_cache::sync::Cache;
use quick_cache::Weighter;

use crate::idempotency::{Fingerprint, RecordId, StoredResponse};

/// A completed record as cached.
#[derive(Debug)]
pub struct Entry {
    pub fingerprint: Fingerprint,
    pub response: StoredResponse,
    expires: Instant,
}

#[derive(Clone)]
struct BySize;

/// Per entry, beyond what `size_of` sees: the cache's slot and its share of the hash
/// table (which grows past the estimated capacity), the `Arc`'s counts, the shared
/// buffer's header, a custom header name's own allocation. Measured: a full 16 MiB
/// cache of ~600-byte responses grew the process by 845 to 925 bytes per entry while
/// this constant was 64 and the weight said 631, so `max_bytes` was exceeded by 40%.
const OVERHEAD: usize = 256;

/// The allocator rounds each allocation up to its size class (mimalloc's classes are
/// at most 1/8 apart): the heap parts are counted an eighth larger.
fn rounded(heap: usize) -> usize {
    heap + heap / 8
}

impl Weighter<[u8; 32], Arc<Entry>> for BySize {
    fn weight(&self, key: &[u8; 32], entry: &Arc<Entry>) -> u64 {
        // What the entry occupies: its key and fixed part, the header list, and the
        // one compact buffer of header values and body (see `insert`).
        let response = &entry.response;
        let list = response.headers.capacity() * size_of::<(HeaderName, HeaderValue)>();
        (key.len() + OVERHEAD + size_of::<Entry>() + rounded(list + response.encoded_len())) as u64
    }
}

/// Bounded in bytes and in age.
pub struct ReplayCache {
    cache: Cache<[u8; 32], Arc<Entry>, BySize>,
    max_age: Duration,
    /// Advanced by every `clear`.
    view: AtomicU64,
}

impl ReplayCache {
    /// `None` when `max_bytes` is 0 (the cache is off).
    pub fn new(max_bytes: u64, max_age: Duration) -> Option<Self> {
        (max_bytes > 0).then(|| Self {
            cache: Cache::with_weighter((max_bytes / 1024).max(16) as usize, max_bytes, BySize),
            max_age,
            view: AtomicU64::new(0),
        })
    }

    /// The current view: take it before asking a tier, and insert what the tier
    /// answered with it.
    pub fn view(&self) -> u64 {
        self.view.load(Ordering::SeqCst)
    }

    /// The unexpired entry for `record`.
    pub fn get(&self, record: RecordId) -> Option<Arc<Entry>> {
        let entry = self.cache.get(record.as_bytes())?;
        if entry.expires <= Instant::now() {
            self.cache.remove(record.as_bytes());
            return None;
        }
        Some(entry)
    }

    /// Caches a compact copy of a completed record that has `remaining` left to live,
    /// read from a tier in view `seen_in` (nothing if the cache was cleared since).
    pub fn insert(
        &self,
        record: RecordId,
        fingerprint: Fingerprint,
        response: &StoredResponse,
        remaining: Duration,
        seen_in: u64,
    ) {
        // Checked here too, so that a stale record is not even copied.
        if self.view() != seen_in {
            return;
        }
        self.insert_compact(
            record,
            fingerprint,
            response.compacted(),
            remaining,
            seen_in,
        );
    }

    /// [`ReplayCache::insert`] of a copy that is already compact ([`crate::idempotency::Encoded`]).
    pub fn insert_compact(
        &self,
        record: RecordId,
        fingerprint: Fingerprint,
        response: StoredResponse,
        remaining: Duration,
        seen_in: u64,
    ) {
        if self.view() != seen_in {
            return;
        }
        let entry = Entry {
            fingerprint,
            response,
            expires: Instant::now() + remaining.min(self.max_age),
        };
        self.cache.insert(*record.as_bytes(), Arc::new(entry));
        // A clear that ran meanwhile may have missed it: `clear` advances the view
        // before it empties the cache, so one of the two removes the entry.
        if self.view() != seen_in {
            self.cache.remove(record.as_bytes());
        }
    }

    /// Forgets `record` (an admin invalidation).
    pub fn remove(&self, record: RecordId) {
        self.cache.remove(record.as_bytes());
    }

    /// Forgets everything and starts a new view: invalidations may have been missed
    /// (the subscription that carries them reconnected, or fell behind), or the tier
    /// answering replays changed (a failover, a breaker).
    pub fn clear(&self) {
        self.view.fetch_add(1, Ordering::SeqCst);
        self.cache.clear();
    }

    /// Cached bytes, for tests and metrics.
    pub fn weight(&self) -> u64 {
        self.cache.weight()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::idempotency::{IdempotencyKey, Scope};
    use bytes::Bytes;
    use http::{HeaderMap, Method, StatusCode};

    fn record(key: &str) -> RecordId {
        let key: IdempotencyKey = crate::idempotency::key::parse(key.as_bytes(), 255).unwrap();
        RecordId::new(Scope::anonymous("r", &[], None), &key, None)
    }

    fn response(body: &'static [u8]) -> StoredResponse {
        StoredResponse::from_upstream(
            StatusCode::CREATED,
            &HeaderMap::new(),
            Bytes::from_static(body),
        )
    }

    fn fp() -> Fingerprint {
        Fingerprint::new(
            &Default::default(),
            &Method::POST,
            &"/x".parse().unwrap(),
            &http::HeaderMap::new(),
            b"",
        )
    }

    #[test]
    fn entries_expire_with_their_record_and_max_age() {
        let cache = ReplayCache::new(1 << 20, Duration::from_millis(50)).unwrap();
        cache.insert(
            record("a"),
            fp(),
            &response(b"a"),
            Duration::from_secs(3600),
            0,
        );
        cache.insert(
            record("b"),
            fp(),
            &response(b"b"),
            Duration::from_millis(1),
            0,
        );
        assert_eq!(cache.get(record("a")).unwrap().response.body, "a");
        std::thread::sleep(Duration::from_millis(5));
        assert!(cache.get(record("b")).is_none(), "expired with its record");
        std::thread::sleep(Duration::from_millis(60));
        assert!(cache.get(record("a")).is_none(), "expired at max_age");
    }

    #[test]
    fn bounded_in_bytes_and_can_be_off() {
        assert!(ReplayCache::new(0, Duration::from_secs(1)).is_none());
        let cache = ReplayCache::new(64 * 1024, Duration::from_secs(60)).unwrap();
        static BODY: [u8; 4096] = [b'x'; 4096];
        for i in 0..100 {
            cache.insert(
                record(&format!("k{i}")),
                fp(),
                &response(&BODY),
                Duration::from_secs(60),
                0,
            );
        }
        assert!(cache.weight() <= 64 * 1024, "weight {}", cache.weight());
        cache.remove(record("k99"));
        assert!(cache.get(record("k99")).is_none());
    }

    /// Tells when the buffer it stands for is freed.
    struct ReadBuffer(Arc<std::sync::atomic::AtomicBool>, Vec<u8>);

    impl AsRef<[u8]> for ReadBuffer {
        fn as_ref(&self) -> &[u8] {
            &self.1
        }
    }

    impl Drop for ReadBuffer {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn entries_do_not_pin_the_buffer_they_were_read_from() {
        // A 64 KiB read buffer holding a short header value and body, as hyper,
        // fred and tokio-postgres hand them out.
        let freed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut raw = vec![b' '; 64 * 1024];
        raw[..10].copy_from_slice(b"req_1{\"a\"}");
        let buffer = Bytes::from_owner(ReadBuffer(freed.clone(), raw));
        let mut headers = HeaderMap::new();
        let value = HeaderValue::from_maybe_shared(buffer.slice(0..5)).unwrap();
        headers.insert("x-request-id", value);
        let stored = StoredResponse::from_upstream(StatusCode::OK, &headers, buffer.slice(5..10));
        drop(headers);
        drop(buffer);
        assert!(!freed.load(std::sync::atomic::Ordering::SeqCst));

        let cache = ReplayCache::new(1 << 20, Duration::from_secs(60)).unwrap();
        cache.insert(record("a"), fp(), &stored, Duration::from_secs(60), 0);
        drop(stored);
        assert!(
            freed.load(std::sync::atomic::Ordering::SeqCst),
            "the cached entry keeps the 64 KiB read buffer alive"
        );
        let entry = cache.get(record("a")).unwrap();
        assert_eq!(entry.response.body, "{\"a\"}");
        assert_eq!(entry.response.headers[0].1, "req_1");
        assert!(cache.weight() < 1024, "weight {}", cache.weight());
    }

    #[test]
    fn a_record_seen_before_a_clear_is_not_cached_after_it() {
        let cache = ReplayCache::new(1 << 20, Duration::from_secs(60)).unwrap();
        let before = cache.view();
        cache.clear();
        let ttl = Duration::from_secs(60);
        cache.insert(record("old"), fp(), &response(b"old"), ttl, before);
        assert!(
            cache.get(record("old")).is_none(),
            "seen in the view before"
        );
        cache.insert(record("new"), fp(), &response(b"new"), ttl, cache.view());
        assert_eq!(cache.get(record("new")).unwrap().response.body, "new");
    }
}
