//! A request's slot of `server.max_concurrent_requests` as the request carries it
//! ([`Slot`]): the proxy listener's in-flight layer puts it in the request's extensions,
//! and the flow keeps a copy for an upstream call that outlives its client.

use std::sync::Arc;

/// A request's slot of `server.max_concurrent_requests`: held while any copy lives.
#[derive(Clone)]
pub struct Slot(#[allow(dead_code)] Arc<dyn Send + Sync>);

impl Slot {
    /// `held` (the limit's guard), given back when the last copy is dropped.
    pub fn new(held: impl Send + Sync + 'static) -> Self {
        Self(Arc::new(held))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    struct Guard(Arc<AtomicUsize>);

    impl Drop for Guard {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_slot_is_given_back_with_its_last_copy() {
        let held = Arc::new(AtomicUsize::new(1));
        let slot = Slot::new(Guard(held.clone()));
        let copy = slot.clone();
        drop(slot);
        assert_eq!(held.load(Ordering::SeqCst), 1);
        drop(copy);
        assert_eq!(held.load(Ordering::SeqCst), 0);
    }
}
