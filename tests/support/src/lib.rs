//! What the integration tests (`tests/it`) and the chaos suite (`tests/chaos`) share:
//! a real Redis ([`redis`]) and Postgres ([`postgres`]) from the fleet launcher with
//! what the tests read from them, a client that writes HTTP/2 frames by hand
//! ([`h2wire`]), and an upstream for the attack scenarios ([`attack_upstream`]).
#![forbid(unsafe_code)]

pub mod attack_upstream;
pub mod h2wire;
pub mod postgres;
pub mod redis;
