//! What an operator sees: metrics after real traffic (and `promtool`), request ids,
//! readiness JSON, and the admin API.

mod admin;
