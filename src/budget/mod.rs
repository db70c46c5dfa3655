//! The byte budget for buffered bodies (`server.buffer_budget`): the accounting that
//! the proxy listener's budget layer ([`crate::server::layers::budget`]) and the
//! request flow's body read ([`crate::flow`]) share.
//!
//! The budget is a counter of bytes, not a pool: a [`Charge`] holds some of it and
//! gives it back when dropped. A charge can travel inside the [`Bytes`](bytes::Bytes)
//! it pays for ([`Charge::attach`]), so that it is returned only when the last copy of
//! those bytes is gone, wherever they went (a detached upstream call, hyper's write
//! buffer). A keyed request body is read through [`Metered`], which charges it as it
//! arrives.
//!
//! Beside it, a request's slot of `server.max_concurrent_requests` ([`Slot`]), which the
//! in-flight layer hands the request flow the same way (in the request's extensions) so
//! that an upstream call that outlives its client keeps it.

mod charge;
mod metered;
mod slot;

pub use charge::{ByteBudget, Charge};
pub use metered::{Metered, OverBudget};
pub use slot::Slot;
