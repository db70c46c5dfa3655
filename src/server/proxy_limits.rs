//! The proxy listener's limits, one set for the process (the `thread_per_core`
//! workers share it): connection slots (`server.max_connections`, taken by the accept
//! loop), the state of the request layers (`server.max_concurrent_requests`,
//! `server.buffer_budget`), and the gauges sampled from them.
//!
//! At `server.max_connections` the loop stops accepting, so new connections wait in
//! the kernel's accept queue, unserved and costing this process nothing, until a
//! connection closes. A load balancer sees a slow connect, or once the queue is full a
//! connect timeout, which it retries elsewhere safely since nothing was sent (a
//! connection accepted and closed would instead fail a request it had already sent,
//! which most balancers do not retry).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use ::metrics::Counter;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::layers::in_flight::InFlightLimit;
use crate::budget::ByteBudget;
use crate::config::ServerConfig;
use crate::metrics::{self, Limit};

/// The proxy listener's limits: connection slots, and those of each request (one for
/// the process: the `thread_per_core` workers share it).
pub(super) struct ProxyLimits {
    max_connections: usize,
    slots: Arc<Semaphore>,
    waited: Counter,
    pub(super) in_flight: Arc<InFlightLimit>,
    pub(super) budget: Arc<ByteBudget>,
}

impl ProxyLimits {
    pub(super) fn new(server: &ServerConfig) -> Self {
        Self {
            max_connections: server.max_connections,
            slots: Arc::new(Semaphore::new(server.max_connections)),
            waited: Limit::MaxConnections.counter(),
            in_flight: Arc::new(InFlightLimit::new(server.max_concurrent_requests)),
            budget: Arc::new(ByteBudget::new(server.buffer_budget.as_u64())),
        }
    }

    /// A slot for an accepted connection: at once, or when a connection closes (the
    /// next connections meanwhile wait in the kernel's accept queue).
    pub(super) async fn slot(&self) -> Option<OwnedSemaphorePermit> {
        if let Ok(slot) = self.slots.clone().try_acquire_owned() {
            return Some(slot);
        }
        self.waited.increment(1);
        tracing::debug!(
            max_connections = self.max_connections,
            "server.max_connections reached: not accepting until a connection closes"
        );
        // Never closed, so this waits for a slot.
        self.slots.clone().acquire_owned().await.ok()
    }

    /// Publishes the gauges every second, off the request path.
    pub(super) async fn sample(&self) -> Infallible {
        let mut every = tokio::time::interval(Duration::from_secs(1));
        loop {
            every.tick().await;
            let open = (self.max_connections).saturating_sub(self.slots.available_permits());
            metrics::limits_sampled(open, self.budget.used());
        }
    }
}
