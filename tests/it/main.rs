//! Integration tests: the gateway in-process against real `redis-server` processes and
//! a counting mock upstream. One test binary, many modules, so they link once.

mod support;

mod admin_race;
mod body_limits;
mod cache;
mod claim_edges;
mod cli;
mod concurrency;
mod durability;
mod faults;
mod keys;
mod lease;
mod limits;
mod observability;
mod outage;
mod pg_ops;
mod replay;
mod tier_edges;
mod upstream_failures;
mod write_timeout;
