//! `server.runtime` and `server.workers`: how the process runs its requests.
//!
//! - `multi_thread` (the default): one tokio runtime with `workers` worker threads
//!   sharing one listener, one set of Redis and Postgres connections, and stealing
//!   each other's tasks.
//! - `thread_per_core`: `workers` OS threads, each with a single-threaded runtime, its
//!   own `SO_REUSEPORT` proxy listener (the kernel spreads connections over them),
//!   and its own Redis and Postgres connections, waiter subscription and upstream
//!   client, like nginx workers; the Postgres write-through and lookup batchers are
//!   one per process, shared. [`worker_share`] divides the configured pools among
//!   the workers ([`crate::server::workers`]).

use std::num::NonZeroUsize;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Config;

/// `server.runtime`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Runtime {
    /// One multi-threaded tokio runtime (work stealing), one listener.
    #[default]
    MultiThread,
    /// One single-threaded runtime per worker, each with its own listener and connections.
    ThreadPerCore,
}

/// `server.workers`: `"auto"` (the cores available to the process) or a count of at
/// least 1. With `multi_thread` it is the runtime's worker threads (`"auto"` leaves
/// tokio's own default, which honours `TOKIO_WORKER_THREADS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Workers {
    #[default]
    Auto,
    Count(NonZeroUsize),
}

impl Workers {
    /// The number of workers to run.
    pub fn get(self) -> usize {
        match self {
            Self::Count(n) => n.get(),
            Self::Auto => std::thread::available_parallelism().map_or(1, NonZeroUsize::get),
        }
    }
}

impl Serialize for Workers {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => s.serialize_str("auto"),
            Self::Count(n) => s.serialize_u64(n.get() as u64),
        }
    }
}

impl<'de> Deserialize<'de> for Workers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Expect;
        impl Visitor<'_> for Expect {
            type Value = Workers;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("\"auto\" or a number of workers of at least 1")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Workers, E> {
                usize::try_from(n)
                    .ok()
                    .and_then(NonZeroUsize::new)
                    .map(Workers::Count)
                    .ok_or_else(|| E::invalid_value(de::Unexpected::Unsigned(n), &self))
            }
            fn visit_i64<E: de::Error>(self, n: i64) -> Result<Workers, E> {
                match u64::try_from(n) {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(E::invalid_value(de::Unexpected::Signed(n), &self)),
                }
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Workers, E> {
                if text == "auto" {
                    return Ok(Workers::Auto);
                }
                match text.parse::<u64>() {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(E::invalid_value(de::Unexpected::Str(text), &self)),
                }
            }
        }
        d.deserialize_any(Expect)
    }
}

/// The configuration of worker `index` of `count` (`thread_per_core`): the connection
/// pools divided among the workers (each at least 1), so the process holds about what
/// the configuration says; the write-through's retry queue stays whole (one writer,
/// shared by the workers: [`crate::app::Batchers`]); migrations run on worker 0 only
/// (the others check the schema it left).
pub fn worker_share(config: &Config, index: usize, count: usize) -> Config {
    let share = |total: usize| total.div_ceil(count.max(1)).max(1);
    let mut config = config.clone();
    config.redis.pool_size = share(config.redis.pool_size);
    if let Some(pg) = config.postgres.as_mut() {
        pg.pool_size = share(pg.pool_size);
        pg.migrate_on_start &= index == 0;
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_and_workers_parse_and_bad_values_name_the_key() {
        let c =
            Config::from_toml("[server]\nruntime = \"thread_per_core\"\nworkers = 3\n").unwrap();
        assert_eq!(c.server.runtime, Runtime::ThreadPerCore);
        assert_eq!(c.server.workers.get(), 3);
        let c = Config::from_toml("[server]\nworkers = \"auto\"\n").unwrap();
        assert_eq!(c.server.runtime, Runtime::MultiThread);
        assert_eq!(c.server.workers, Workers::Auto);
        assert!(c.server.workers.get() >= 1);
        for (text, key) in [
            ("[server]\nruntime = \"one_per_core\"\n", "server.runtime"),
            ("[server]\nworkers = 0\n", "server.workers"),
            ("[server]\nworkers = \"many\"\n", "server.workers"),
        ] {
            let err = Config::from_toml(text).unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
    }

    #[test]
    fn workers_round_trip_through_toml() {
        let c = Config::from_toml("[server]\nworkers = 2\n").unwrap();
        let back = Config::from_toml(&c.to_redacted_toml()).unwrap();
        assert_eq!(back.server.workers.get(), 2);
        let back = Config::from_toml(&Config::default().to_redacted_toml()).unwrap();
        assert_eq!(back.server.workers, Workers::Auto);
    }

    #[test]
    fn pools_are_divided_among_workers_at_least_one_each() {
        let mut c = Config::from_toml("[postgres]\npool_size = 8\nretry_queue = 10\n").unwrap();
        c.redis.pool_size = 4;
        let w0 = worker_share(&c, 0, 3);
        let w2 = worker_share(&c, 2, 3);
        assert_eq!(w0.redis.pool_size, 2);
        let pg = |c: &Config| c.postgres.clone().unwrap();
        assert_eq!(pg(&w2).pool_size, 3);
        // One writer for the process: its retry queue is not divided.
        assert_eq!(pg(&w2).retry_queue, 10);
        assert!(pg(&w0).migrate_on_start);
        assert!(!pg(&w2).migrate_on_start);
        c.redis.pool_size = 1;
        assert_eq!(worker_share(&c, 1, 8).redis.pool_size, 1);
    }
}
