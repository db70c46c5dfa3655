//! Claiming a key and holding it: the key (from a header or the JSON body) and the
//! method filter, concurrent duplicates, leases and their heartbeat, fencing tokens,
//! waiting duplicates and their wake-ups, a lease that lapsed with no completion, storing the response while the lease lasts
//! (settle), callers that go away mid-claim, and the admin `DELETE` racing a claim.

mod admin_race;
mod concurrency;
mod edges;
mod faults;
mod key_from;
mod keys;
mod lapse;
mod lease;
mod settle;
mod settle_lease;
mod wakeups;
