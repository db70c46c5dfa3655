//! The Redis circuit breaker, one per shard: open while a shard's primary fails, so
//! claims of its slots go straight to the fallback policy instead of waiting for a
//! timeout each; the probe closes it once that shard takes a write again.
//!
//! A shard is a set of hash slots ([`super::cold_slots::SlotSet`]): in a cluster, the
//! slots of one primary as fred routes them when the breaker trips; in standalone and
//! Sentinel mode, every slot (one breaker). A claim of a slot whose breaker is closed
//! goes to Redis while another shard's breaker is open.
//!
//! A shard trips when a claim meets a lost connection, and also when it stays silent:
//! every claim sent to it timing out, with no answer of any kind, for `silent_after`
//! (twice the command timeout). fred's own check for a connection that stops answering
//! restarts its clock at every write, so a primary behind a partition (or paused) that
//! keeps being sent claims is never declared lost; its claims would only time out, one
//! by one, for as long as the partition lasts and beyond a failover (fred learns the new
//! primary from a `MOVED`, which a silent node never sends). A Redis that answers, even
//! slowly or with errors, is never silent: its claims stay in Redis.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::cold_slots::{Bits, SlotSet};

/// Open slots: do not send their claims to Redis.
#[derive(Debug, Default)]
pub struct Breaker {
    open: SlotSet,
    /// Some slot is open: the one load of the hot path while every shard answers.
    any: AtomicBool,
    trips: AtomicU64,
    /// Trips and closes, one at a time (rare), so that `any` follows `open`.
    change: Mutex<()>,
    /// Slots of shards whose last claims all timed out: a success there ends the silence.
    silent: SlotSet,
    /// Since when each silent shard (by name) has answered nothing, and its slots.
    silences: Mutex<HashMap<String, (Instant, Bits)>>,
}

impl Breaker {
    /// Whether the breaker of `slot`'s shard is open.
    pub fn is_open(&self, slot: u16) -> bool {
        self.any_open() && self.open.contains(slot)
    }

    /// Whether some shard's breaker is open.
    pub fn any_open(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    /// The open slots now.
    pub fn open_slots(&self) -> Bits {
        self.open.snapshot()
    }

    /// Opens the breaker of the shard of `slots`; true if one of them was closed.
    pub fn trip(&self, slots: &Bits) -> bool {
        let _one = self.change.lock().unwrap_or_else(|e| e.into_inner());
        let tripped = self.open.add(slots);
        self.any.store(!self.open.is_empty(), Ordering::Release);
        // Its silence is over: counted again from its next timeout once it closes.
        let mut silences = self.silences.lock().unwrap_or_else(|e| e.into_inner());
        silences.retain(|_, (_, s)| !s.iter().zip(slots).any(|(a, b)| a & b != 0));
        self.silent.remove(slots);
        if tripped {
            self.trips.fetch_add(1, Ordering::Relaxed);
        }
        tripped
    }

    /// Closes the breaker of the shard of `slots`; true if one of them was open.
    pub fn close(&self, slots: &Bits) -> bool {
        let _one = self.change.lock().unwrap_or_else(|e| e.into_inner());
        let closed = self.open.remove(slots);
        self.any.store(!self.open.is_empty(), Ordering::Release);
        closed
    }

    /// A claim in the shard `name` (of `slots`) timed out: whether the shard has now
    /// answered nothing for `silent_after` (the caller trips it).
    pub fn timed_out(&self, name: &str, slots: &Bits, silent_after: Duration) -> bool {
        let mut silences = self.silences.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let (since, _) = silences
            .entry(name.to_string())
            .or_insert_with(|| (now, slots.clone()));
        let silent = now.duration_since(*since) >= silent_after;
        self.silent.add(slots);
        silent
    }

    /// A claim in `slot` got an answer: its shard is not silent. One atomic load unless
    /// the shard had timed out.
    pub fn answered(&self, slot: u16) {
        if !self.silent.contains(slot) {
            return;
        }
        let mut silences = self.silences.lock().unwrap_or_else(|e| e.into_inner());
        let word = usize::from(slot) / 64;
        let bit = 1u64 << (usize::from(slot) % 64);
        silences.retain(|_, (_, slots)| {
            let in_shard = slots[word] & bit != 0;
            if in_shard {
                self.silent.remove(slots);
            }
            !in_shard
        });
    }

    /// How many times a shard's breaker has opened.
    pub fn trips(&self) -> u64 {
        self.trips.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::redis::cold_slots::{all_slots, bits_of_range};

    #[test]
    fn transitions_report_once() {
        let b = Breaker::default();
        assert!(!b.is_open(0) && !b.any_open());
        assert!(b.trip(&all_slots()));
        assert!(!b.trip(&all_slots()));
        assert!(b.is_open(0) && b.is_open(16383));
        assert!(b.close(&all_slots()));
        assert!(!b.close(&all_slots()));
        assert!(!b.any_open());
        assert_eq!(b.trips(), 1);
    }

    #[test]
    fn one_shard_open_leaves_the_others_closed() {
        let b = Breaker::default();
        let (first, second) = (bits_of_range(0, 5460), bits_of_range(5461, 10922));
        assert!(b.trip(&first));
        assert!(b.is_open(0) && b.is_open(5460));
        assert!(
            !b.is_open(5461) && !b.is_open(16383),
            "other shards stay closed"
        );
        assert!(b.trip(&second));
        assert!(b.close(&first));
        assert!(b.any_open() && b.is_open(6000) && !b.is_open(100));
        assert!(b.close(&second));
        assert!(!b.any_open());
        assert_eq!(b.trips(), 2);
    }

    #[test]
    fn a_shard_is_silent_after_timeouts_without_an_answer() {
        let b = Breaker::default();
        let (first, second) = (bits_of_range(0, 5460), bits_of_range(5461, 10922));
        let after = Duration::from_millis(30);
        assert!(!b.timed_out("a", &first, after));
        b.answered(6000); // another shard's answer changes nothing
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.timed_out("a", &first, after), "no answer for 40 ms");
        // An answer in the shard ends its silence.
        b.answered(17);
        assert!(!b.timed_out("a", &first, after));
        assert!(!b.timed_out("b", &second, after));
        std::thread::sleep(Duration::from_millis(40));
        assert!(b.trip(&second) || b.timed_out("b", &second, after));
        assert!(
            !b.timed_out("b", &second, after),
            "a trip starts the count over"
        );
    }
}
