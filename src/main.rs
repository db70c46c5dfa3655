//! The `idemgate` command: `serve`, `check-config`, `migrate`, `reap`, `explain`,
//! `health`.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use idemgate::commands::{migrate, ready_probe, PgStore, Readiness, StoreError, ThreadPerCore};
use idemgate::config::{Runtime, Workers};
use idemgate::{App, Config, Server};

/// mimalloc rather than glibc's malloc: a request allocates and frees many small
/// objects across threads, which glibc's allocator does at a cost measured in
/// docs/history/benchmarks.md ("What changed and what it bought"). Built without huge
/// pages (`no_thp` in Cargo.toml), which kept peak RSS at glibc's level.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "idemgate",
    version,
    about = "An idempotency gateway for HTTP APIs, backed by Redis"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Serve(ConfigArg),
    /// Validate the configuration and print it, secrets redacted.
    CheckConfig(ConfigArg),
    /// Apply the database migrations (safe to run from several replicas at once).
    Migrate(ConfigArg),
    /// Delete expired records once (for cron); the server also reaps in the background.
    Reap(ConfigArg),
    /// Show how the configured Postgres runs a durable first execution's statements
    /// (claim, write-through, lookup, and the insert completing claims Redis held alone):
    /// EXPLAIN (ANALYZE, BUFFERS, WAL) for fresh keys, in a transaction that is rolled
    /// back, so nothing stays written.
    Explain(ExplainArgs),
    /// Ask this replica's admin listener for `/readyz`: exit 0 when ready, 1 otherwise
    /// (for a container HEALTHCHECK or an exec probe, where there is no curl).
    Health(HealthArgs),
}

#[derive(clap::Args)]
struct ExplainArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Keys in the explained round (the gateway's rounds hold a few to a few dozen).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u16).range(1..=1000))]
    keys: u16,
}

#[derive(clap::Args)]
struct HealthArgs {
    #[command(flatten)]
    config: ConfigArg,
    /// Longest the whole check may take (connect, request, answer).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

#[derive(clap::Args)]
struct ConfigArg {
    /// TOML configuration file; built-in defaults and IDEMGATE__SECTION__KEY variables apply without it.
    #[arg(long, env = "IDEMGATE_CONFIG")]
    config: Option<PathBuf>,
}

fn main() -> ExitCode {
    // `--version`: the version and the stored formats this binary writes and reads.
    let version = format!(
        "{}\n{}",
        env!("CARGO_PKG_VERSION"),
        idemgate::commands::stored_formats()
    );
    let version: &'static str = Box::leak(version.into_boxed_str());
    let matches = Cli::command().version(version).get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let arg = match &cli.command {
        Command::Serve(arg)
        | Command::CheckConfig(arg)
        | Command::Migrate(arg)
        | Command::Reap(arg)
        | Command::Explain(ExplainArgs { config: arg, .. })
        | Command::Health(HealthArgs { config: arg, .. }) => arg,
    };
    let config = match Config::load(arg.config.as_deref()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("idemgate: {e}");
            // A health check's failure is 1: container runtimes reserve 2.
            let code = if matches!(cli.command, Command::Health(_)) {
                1
            } else {
                2
            };
            return ExitCode::from(code);
        }
    };
    match cli.command {
        Command::CheckConfig(_) => check_config(&config),
        Command::Health(args) => health(&config, args.timeout),
        Command::Serve(_) => report(serve(config)),
        Command::Migrate(_) => report(with_postgres(config, |pg, _| async move {
            let applied = pg.migrate().await?;
            println!(
                "schema at version {} (applied: {applied:?})",
                migrate::latest()
            );
            Ok(())
        })),
        Command::Reap(_) => report(with_postgres(config, |pg, batch| async move {
            match pg.reap(batch).await? {
                Some(n) => println!("deleted {n} expired records"),
                None => println!("another replica is reaping; nothing done"),
            }
            Ok(())
        })),
        Command::Explain(args) => report(with_postgres(config, |pg, _| async move {
            for plan in pg.explain_first_execution(args.keys.into()).await? {
                println!("--- {} ({} fresh keys)", plan.statement, args.keys);
                for line in plan.lines {
                    println!("{line}");
                }
            }
            Ok(())
        })),
    }
}

/// `idemgate check-config`: the listener's certificate files read (exit 2 if they cannot
/// be used, as for a configuration error), the deprecations and the configuration warnings on
/// standard error, the configuration (secrets redacted) on standard output. Warnings
/// do not fail a valid configuration: the exit code stays 0.
fn check_config(config: &Config) -> ExitCode {
    if let Err(e) = idemgate::commands::check_listener_tls(config) {
        eprintln!("idemgate: {e}");
        return ExitCode::from(2);
    }
    for deprecation in &config.deprecated {
        eprintln!("idemgate: warning: {deprecation}");
    }
    for warning in idemgate::config::warnings(config) {
        eprintln!("idemgate: warning: {warning}");
    }
    print!("{}", config.to_redacted_toml());
    ExitCode::SUCCESS
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idemgate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `idemgate health`: prints `/readyz`'s answer; 0 only for a 200.
fn health(config: &Config, timeout: Duration) -> ExitCode {
    match ready_probe::check(config.server.admin_listen, timeout) {
        Ok(Readiness::Ready { body }) => {
            println!("ready: {body}");
            ExitCode::SUCCESS
        }
        Ok(Readiness::NotReady { status, body }) => {
            println!("not ready ({status}): {body}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("idemgate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs `work` against the configured Postgres, on a small runtime.
fn with_postgres<F, Fut>(config: Config, work: F) -> anyhow::Result<()>
where
    F: FnOnce(PgStore, usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), StoreError>>,
{
    let pg = config
        .postgres
        .as_ref()
        .context("no [postgres] section configured (postgres.url)")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let store = PgStore::new(pg)?;
    runtime.block_on(work(store, pg.reap_batch))?;
    Ok(())
}

fn serve(config: Config) -> anyhow::Result<()> {
    let _log = idemgate::commands::init_logging(&config.log, &config.tracing)?;
    for deprecation in &config.deprecated {
        tracing::warn!(old = %deprecation.old, new = %deprecation.new, "{deprecation}");
    }
    if config.server.runtime == Runtime::ThreadPerCore {
        return serve_thread_per_core(config);
    }
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Workers::Count(n) = config.server.workers {
        runtime.worker_threads(n.get());
    }
    let runtime = runtime
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async {
        let app = App::build(config).await.context("building the gateway")?;
        let server = Server::bind(app).await?;
        server.run(shutdown_signal()).await;
        Ok(())
    })
}

/// `server.runtime = "thread_per_core"`: the workers serve on their own threads; this
/// one waits for SIGTERM or SIGINT, then for every worker to drain.
fn serve_thread_per_core(config: Config) -> anyhow::Result<()> {
    let signals = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let workers = ThreadPerCore::start(config)?;
    signals.block_on(shutdown_signal());
    workers.stop();
    workers.join();
    tracing::info!("stopped");
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
