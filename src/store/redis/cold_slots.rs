//! A set of hash slots (16,384 bits, lock-free): the slots whose warmth markers a
//! replica owes a reset, because Redis may lack a record of theirs that Postgres has,
//! and the slots whose shard's circuit breaker is open ([`super::breaker`]).

use std::sync::atomic::{AtomicU64, Ordering};

use super::slots::SLOTS;

const WORDS: usize = SLOTS / 64;

/// Slots, as bits.
#[derive(Debug)]
pub struct SlotSet {
    words: Vec<AtomicU64>,
}

impl Default for SlotSet {
    fn default() -> Self {
        Self {
            words: (0..WORDS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// A snapshot of some bits of a [`SlotSet`], word by word.
pub type Bits = Vec<u64>;

impl SlotSet {
    pub fn insert(&self, slot: u16) {
        let s = usize::from(slot) % SLOTS;
        self.words[s / 64].fetch_or(1 << (s % 64), Ordering::AcqRel);
    }

    pub fn contains(&self, slot: u16) -> bool {
        let s = usize::from(slot) % SLOTS;
        self.words[s / 64].load(Ordering::Acquire) & (1 << (s % 64)) != 0
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| w.load(Ordering::Acquire) == 0)
    }

    /// Whether any of `bits` is set.
    pub fn intersects(&self, bits: &Bits) -> bool {
        (self.words.iter().zip(bits)).any(|(w, b)| w.load(Ordering::Acquire) & b != 0)
    }

    /// The bits set now.
    pub fn snapshot(&self) -> Bits {
        self.words
            .iter()
            .map(|w| w.load(Ordering::Acquire))
            .collect()
    }

    /// Moves every bit of `self` within `mask` (every bit: `None`) into `to` (set there
    /// first, so a slot is never in neither) and returns them.
    pub fn move_into(&self, to: &SlotSet, mask: Option<&Bits>) -> Bits {
        (self.words.iter().zip(&to.words).enumerate())
            .map(|(i, (from, to))| {
                let bits = from.load(Ordering::Acquire) & mask.map_or(u64::MAX, |m| m[i]);
                to.fetch_or(bits, Ordering::AcqRel);
                from.fetch_and(!bits, Ordering::AcqRel);
                bits
            })
            .collect()
    }

    /// Sets `bits`; whether one of them was not set yet.
    pub fn add(&self, bits: &Bits) -> bool {
        let mut new = false;
        for (w, b) in self.words.iter().zip(bits) {
            new |= w.fetch_or(*b, Ordering::AcqRel) & b != *b;
        }
        new
    }

    /// Clears `bits`; whether one of them was set.
    pub fn remove(&self, bits: &Bits) -> bool {
        let mut was = false;
        for (w, b) in self.words.iter().zip(bits) {
            was |= w.fetch_and(!*b, Ordering::AcqRel) & b != 0;
        }
        was
    }
}

/// The slots `first..=last`, as bits.
pub fn bits_of_range(first: u16, last: u16) -> Bits {
    let mut bits = vec![0u64; WORDS];
    for s in usize::from(first)..=usize::from(last).min(SLOTS - 1) {
        bits[s / 64] |= 1 << (s % 64);
    }
    bits
}

/// Every slot, as bits.
pub fn all_slots() -> Bits {
    vec![u64::MAX; WORDS]
}

/// The slots in `bits`, in order.
pub fn slots_of(bits: &Bits) -> Vec<u16> {
    (bits.iter().enumerate())
        .flat_map(|(i, w)| {
            (0..64)
                .filter(move |b| w & (1 << b) != 0)
                .map(move |b| i * 64 + b)
        })
        .filter_map(|s| u16::try_from(s).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_and_restores_bits() {
        let (pending, resetting) = (SlotSet::default(), SlotSet::default());
        assert!(pending.is_empty());
        pending.insert(5);
        pending.insert(16383);
        let bits = pending.move_into(&resetting, None);
        assert_eq!(slots_of(&bits), vec![5, 16383]);
        assert!(pending.is_empty() && resetting.contains(5) && resetting.contains(16383));
        assert!(pending.add(&bits));
        assert!(!pending.add(&bits), "nothing new");
        assert!(resetting.remove(&bits));
        assert!(!resetting.remove(&bits), "nothing left");
        assert!(resetting.is_empty() && pending.contains(5) && !pending.contains(6));
        // Within a mask only.
        let moved = pending.move_into(&resetting, Some(&bits_of_range(0, 100)));
        assert_eq!(slots_of(&moved), vec![5]);
        assert!(pending.contains(16383) && !pending.contains(5) && resetting.contains(5));
        assert!(pending.intersects(&all_slots()) && !pending.intersects(&bits_of_range(0, 16382)));
        assert_eq!(slots_of(&bits_of_range(16380, 16383)).len(), 4);
    }
}
