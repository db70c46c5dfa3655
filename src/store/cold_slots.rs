//! A set of hash slots (16,384 bits, lock-free): the slots whose warmth markers a
//! replica owes a reset, because Redis may lack a record of theirs that Postgres has.

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

    /// Moves every bit of `self` into `to` (set there first, so a slot is never in
    /// neither) and returns them.
    pub fn move_into(&self, to: &SlotSet) -> Bits {
        (self.words.iter().zip(&to.words))
            .map(|(from, to)| {
                let bits = from.load(Ordering::Acquire);
                to.fetch_or(bits, Ordering::AcqRel);
                from.fetch_and(!bits, Ordering::AcqRel);
                bits
            })
            .collect()
    }

    /// Sets `bits`.
    pub fn add(&self, bits: &Bits) {
        for (w, b) in self.words.iter().zip(bits) {
            w.fetch_or(*b, Ordering::AcqRel);
        }
    }

    /// Clears `bits`.
    pub fn remove(&self, bits: &Bits) {
        for (w, b) in self.words.iter().zip(bits) {
            w.fetch_and(!*b, Ordering::AcqRel);
        }
    }
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
        let bits = pending.move_into(&resetting);
        assert_eq!(slots_of(&bits), vec![5, 16383]);
        assert!(pending.is_empty() && resetting.contains(5) && resetting.contains(16383));
        pending.add(&bits);
        resetting.remove(&bits);
        assert!(resetting.is_empty() && pending.contains(5) && !pending.contains(6));
    }
}
