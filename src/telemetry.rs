//! Log set-up: `tracing` to stderr as text or JSON, filtered by `log.filter` or `RUST_LOG`,
//! and written by a background thread, so that a request never waits on stderr.
//!
//! Request threads hand each formatted line to the writer thread through a bounded
//! queue (`log.queue_lines`). The writer thread buffers what it receives and writes it
//! in large chunks, flushing whenever the queue runs empty. If stderr is slower than
//! the gateway (a full pipe, a stalled log collector), lines beyond the queue are
//! dropped rather than stalling requests; they are counted in
//! `idemgate_log_lines_dropped_total` and reported at shutdown.

use std::io::{BufWriter, IsTerminal};
use std::sync::OnceLock;

use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

use crate::config::{LogConfig, LogFormat};

static DROPPED: OnceLock<ErrorCounter> = OnceLock::new();

/// Keeps the writer thread; dropping it writes out what is still queued. Hold it in
/// `main` for as long as the process logs.
#[must_use = "dropping the guard stops the log writer"]
pub struct LogGuard {
    _writer: WorkerGuard,
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        let dropped = dropped_lines();
        if dropped > 0 {
            eprintln!("idemgate: {dropped} log lines were dropped because stderr fell behind");
        }
    }
}

/// Installs the global subscriber. Call once, from `main`.
pub fn init(config: &LogConfig) -> LogGuard {
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(config.queue_lines)
        .thread_name("idemgate-log")
        .finish(BufWriter::with_capacity(64 * 1024, std::io::stderr()));
    let _ = DROPPED.set(writer.error_counter());
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&config.filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(writer);
    let result = match config.format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
    if let Err(e) = result {
        eprintln!("idemgate: logging already initialised: {e}");
    }
    LogGuard { _writer: guard }
}

/// Log lines dropped so far because the writer thread fell behind.
pub fn dropped_lines() -> u64 {
    DROPPED.get().map_or(0, |c| c.dropped_lines() as u64)
}
