//! The layer that applies the byte budget for buffered bodies (`server.buffer_budget`,
//! the accounting in [`crate::budget`]), shared by every request of the proxy listener
//! ([`BudgetLayer`]).
//!
//! Keyed request bodies are charged by the gateway (`read_bounded`) before anything is
//! claimed, and the charge travels inside the body's bytes, so it is returned only
//! when the last copy of the body is gone: after the upstream call, also when the
//! client hung up.
//!
//! Buffered responses (stored, replayed) are charged when the handler returns
//! ([`settle`](layer::settle)), and the charge again travels inside the bytes handed to hyper
//! ([`ResponseBody`]), so a client that does not read keeps it until
//! `server.write_timeout` closes its connection. A response that was just executed is
//! charged even over the budget (the upstream acted; refusing would only throw the
//! answer away); a replay that does not fit is answered 503 `overloaded` instead (the
//! stored response stays, a retry gets it). Once the budget is spent, every new keyed
//! request is refused before its body is read, so what is buffered stays within the
//! budget plus what the requests already admitted bring back (at most
//! `server.max_concurrent_requests` responses, [`super::in_flight`]).

mod layer;
mod response;

pub use layer::{BudgetLayer, Budgeted};
pub use response::{overloaded, ResponseBody};
