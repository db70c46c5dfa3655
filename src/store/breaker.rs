//! The Redis circuit breaker: open while Redis fails, so claims go straight to the
//! fallback policy instead of waiting for a timeout each; a probe closes it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Open means: do not send claims to Redis.
#[derive(Debug, Default)]
pub struct Breaker {
    open: AtomicBool,
    trips: AtomicU64,
}

impl Breaker {
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Opens the breaker; true if it was closed.
    pub fn trip(&self) -> bool {
        let tripped = !self.open.swap(true, Ordering::AcqRel);
        if tripped {
            self.trips.fetch_add(1, Ordering::Relaxed);
        }
        tripped
    }

    /// Closes the breaker; true if it was open.
    pub fn close(&self) -> bool {
        self.open.swap(false, Ordering::AcqRel)
    }

    /// How many times it has opened.
    pub fn trips(&self) -> u64 {
        self.trips.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_report_once() {
        let b = Breaker::default();
        assert!(!b.is_open());
        assert!(b.trip());
        assert!(!b.trip());
        assert!(b.is_open());
        assert!(b.close());
        assert!(!b.close());
        assert_eq!(b.trips(), 1);
    }
}
