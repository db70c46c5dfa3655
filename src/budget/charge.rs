//! The budget's accounting: a counter of bytes, not a pool. A [`Charge`] holds some
//! of it and gives it back when dropped; it can travel inside the [`Bytes`] it pays
//! for ([`Charge::attach`]), so that it is returned only when the last copy of those
//! bytes is gone, wherever they went (a detached upstream call, hyper's write buffer).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use metrics::Counter;

use crate::metrics::Limit;

/// Bytes of buffered bodies, up to a limit, shared by every request of a listener; or
/// one connection's share of such a budget ([`ByteBudget::share`]), whose charges count
/// against both.
pub struct ByteBudget {
    limit: u64,
    used: AtomicU64,
    refused: Counter,
    /// The listener's budget, for a connection's share.
    parent: Option<Arc<ByteBudget>>,
}

impl ByteBudget {
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            used: AtomicU64::new(0),
            refused: Limit::BufferBudget.counter(),
            parent: None,
        }
    }

    /// A share of `parent` of at most `limit` bytes (one connection's), refusals
    /// counted as `refused` when the share, not `parent`, is what is spent.
    pub fn share(parent: Arc<ByteBudget>, limit: u64, refused: Counter) -> Self {
        Self {
            limit,
            used: AtomicU64::new(0),
            refused,
            parent: Some(parent),
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
            return None;
        }
        Some(Charge {
            budget: self.clone(),
            bytes,
        })
    }

    /// Charges `bytes` even past the limit.
    pub fn take_anyway(self: &Arc<Self>, bytes: u64) -> Charge {
        self.add(bytes);
        Charge {
            budget: self.clone(),
            bytes,
        }
    }

    fn add(&self, bytes: u64) {
        self.used.fetch_add(bytes, Ordering::AcqRel);
        if let Some(parent) = &self.parent {
            parent.add(bytes);
        }
    }

    fn give_back(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
        if let Some(parent) = &self.parent {
            parent.give_back(bytes);
        }
    }

    /// Takes `bytes` from this budget and its parent, or from neither (a refusal is
    /// counted by the one that refused).
    fn grab(&self, bytes: u64) -> bool {
        if !self.grab_here(bytes) {
            self.refused.increment(1);
            return false;
        }
        if let Some(parent) = &self.parent {
            if !parent.grab(bytes) {
                self.used.fetch_sub(bytes, Ordering::AcqRel);
                return false;
            }
        }
        true
    }

    fn grab_here(&self, bytes: u64) -> bool {
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
        self.budget.give_back(self.bytes);
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
    fn a_share_counts_against_its_parent_and_refuses_past_its_own_limit() {
        let parent = Arc::new(ByteBudget::new(100));
        let share = |limit| {
            Arc::new(ByteBudget::share(
                parent.clone(),
                limit,
                Limit::ConnectionBudget.counter(),
            ))
        };
        let (a, b) = (share(40), share(40));
        let one = a.try_take(30).unwrap();
        assert_eq!((a.used(), parent.used()), (30, 30));
        assert!(a.try_take(11).is_none(), "past the share");
        let two = b.try_take(40).unwrap();
        let other = parent.try_take(30).unwrap();
        assert!(a.try_take(1).is_none(), "the parent is spent");
        assert_eq!(a.used(), 30, "a refusal by the parent takes nothing");
        let over = a.take_anyway(50);
        assert_eq!((a.used(), parent.used()), (80, 150));
        drop((one, two, other, over));
        assert_eq!((a.used(), b.used(), parent.used()), (0, 0, 0));
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
