//! The budget's accounting: a counter of bytes, not a pool. A [`Charge`] holds some
//! of it and gives it back when dropped; it can travel inside the [`Bytes`] it pays
//! for ([`Charge::attach`]), so that it is returned only when the last copy of those
//! bytes is gone, wherever they went (a detached upstream call, hyper's write buffer).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use metrics::Counter;

use crate::metrics::Limit;

/// Bytes of buffered bodies, up to a limit, shared by every request of a listener.
pub struct ByteBudget {
    limit: u64,
    used: AtomicU64,
    refused: Counter,
}

impl ByteBudget {
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            used: AtomicU64::new(0),
            refused: Limit::BufferBudget.counter(),
        }
    }

    /// Bytes currently charged.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Charges `bytes` if they fit and the budget is not spent (so even a request
    /// without a body is refused once it is); counts a refusal.
    pub fn try_take(self: &Arc<Self>, bytes: u64) -> Option<Charge> {
        if !self.grab(bytes) {
            self.refused.increment(1);
            return None;
        }
        Some(Charge {
            budget: self.clone(),
            bytes,
        })
    }

    /// Charges `bytes` even past the limit.
    pub fn take_anyway(self: &Arc<Self>, bytes: u64) -> Charge {
        self.used.fetch_add(bytes, Ordering::AcqRel);
        Charge {
            budget: self.clone(),
            bytes,
        }
    }

    fn grab(&self, bytes: u64) -> bool {
        let mut used = self.used.load(Ordering::Relaxed);
        loop {
            if used >= self.limit || bytes > self.limit - used {
                return false;
            }
            match (self.used).compare_exchange_weak(
                used,
                used + bytes,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => used = now,
            }
        }
    }
}

/// Part of a [`ByteBudget`], given back on drop.
pub struct Charge {
    budget: Arc<ByteBudget>,
    bytes: u64,
}

impl Charge {
    /// Charges `more` bytes on top, if they fit; counts a refusal.
    pub fn try_grow(&mut self, more: u64) -> bool {
        if !self.budget.grab(more) {
            self.budget.refused.increment(1);
            return false;
        }
        self.bytes += more;
        true
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// `bytes` that give the charge back when their last copy is dropped.
    pub fn attach(self, bytes: Bytes) -> Bytes {
        Bytes::from_owner(Charged {
            bytes,
            _charge: self,
        })
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// The owner of charged [`Bytes`]: the data and its charge live and die together.
struct Charged {
    bytes: Bytes,
    _charge: Charge,
}

impl AsRef<[u8]> for Charged {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_refuses_what_does_not_fit_and_everything_once_spent() {
        let budget = Arc::new(ByteBudget::new(100));
        let a = budget.try_take(60).unwrap();
        assert!(budget.try_take(41).is_none());
        let b = budget.try_take(40).unwrap();
        assert_eq!(budget.used(), 100);
        assert!(
            budget.try_take(0).is_none(),
            "spent: even an empty body waits"
        );
        drop(a);
        let over = budget.take_anyway(500);
        assert_eq!(budget.used(), 540);
        assert!(budget.try_take(1).is_none());
        drop((b, over));
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn attached_bytes_give_the_charge_back_with_their_last_copy() {
        let budget = Arc::new(ByteBudget::new(100));
        let bytes = budget
            .try_take(10)
            .unwrap()
            .attach(Bytes::from_static(b"0123456789"));
        let copy = bytes.slice(2..4);
        drop(bytes);
        assert_eq!(budget.used(), 10);
        assert_eq!(&copy[..], b"23");
        drop(copy);
        assert_eq!(budget.used(), 0);
    }
}
