//! Running one scenario: one at a time (a process-wide lock, so `cargo test`'s threads
//! do not run two fleets at once on a small machine), on its own runtime, bounded in
//! time; a panic or a timeout is a FAIL row too. The row is written before the test
//! fails, so `make chaos` prints every verdict.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::checker::{self, Expect, Report};
use crate::cluster::Stack;
use crate::driver::{self, Phase, Plan, Recorder, Workload};
use crate::report;

static SERIAL: Mutex<()> = Mutex::new(());

/// Longest a scenario may take, fleet start and final passes included.
const SCENARIO_LIMIT: Duration = Duration::from_secs(150);

pub fn run<F, Fut>(scenario: &str, body: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Report>,
{
    run_within(scenario, SCENARIO_LIMIT, body)
}

/// [`run`] with a tighter bound (a fast-subset row that must stay quick).
pub fn run_within<F, Fut>(scenario: &str, limit: Duration, body: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Report>,
{
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    let name = scenario.to_string();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        runtime.block_on(async { tokio::time::timeout(limit, body(name)).await })
    }));
    runtime.shutdown_timeout(Duration::from_secs(5));
    let report = match outcome {
        Ok(Ok(report)) => report,
        Ok(Err(_)) => failed(scenario, format!("timed out after {limit:?}")),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failed(scenario, format!("panicked: {msg}"))
        }
    };
    report::emit(&report, started.elapsed().as_secs_f64());
    assert_ne!(
        report.verdict(),
        "FAIL",
        "{scenario}: {:#?}",
        report.violations
    );
}

fn failed(scenario: &str, why: String) -> Report {
    let mut r = Report {
        scenario: scenario.to_string(),
        ..Default::default()
    };
    r.notes.push(why.chars().take(200).collect());
    r.fail(why);
    r
}

/// A workload running in the background.
pub struct Running {
    pub rec: Arc<Recorder>,
    pub http: reqwest::Client,
    pub t0: Instant,
    handle: JoinHandle<Vec<Plan>>,
}

pub fn start(w: Workload) -> Running {
    let rec = Recorder::new();
    let http = driver::client();
    let handle = tokio::spawn(driver::run(Arc::new(w), rec.clone(), http.clone()));
    Running {
        rec,
        http,
        t0: Instant::now(),
        handle,
    }
}

impl Running {
    /// Sleeps until `ms` after the load started.
    pub async fn at(&self, ms: u64) {
        tokio::time::sleep_until((self.t0 + Duration::from_millis(ms)).into()).await;
    }

    /// Waits for the load to end (new keys stop at its duration; retries end by the
    /// key deadline).
    pub async fn plans(&mut self) -> Vec<Plan> {
        (&mut self.handle).await.expect("driver panicked")
    }
}

/// After the fault: let the fleet heal, re-send every acknowledged request through the
/// front (expecting replays), and with Postgres flush Redis and do it again (what the
/// durable tier kept); then read the ledger and check every invariant.
pub async fn finish(
    scenario: &str,
    stack: &mut Stack,
    run: &Running,
    plans: &[Plan],
    expect: Expect,
) -> Report {
    let mut late = Vec::new();
    if !stack.wait_all_ready(Duration::from_secs(20)).await {
        late.push("a replica was not ready 20 s after the fault".to_string());
    }
    stack.wait_front(Duration::from_secs(10)).await;
    let acked = checker::acknowledged(&run.rec.all(), plans);
    driver::resend_all(
        run.rec.clone(),
        run.http.clone(),
        stack.front(),
        acked.clone(),
        Phase::Final,
        Duration::from_secs(20),
        32,
    )
    .await;
    if stack.has_postgres() {
        if !stack.wait_queues_drained(Duration::from_secs(15)).await {
            late.push("write-through queues not drained 15 s after the fault".to_string());
        }
        stack.flush_redis();
        driver::resend_all(
            run.rec.clone(),
            run.http.clone(),
            stack.front(),
            acked,
            Phase::Durable,
            Duration::from_secs(20),
            32,
        )
        .await;
    }
    let ledger = stack.ledger().await;
    let mut report = checker::check(
        scenario,
        expect,
        plans,
        &run.rec.all(),
        &ledger,
        run.rec.requests(),
    );
    for l in late {
        report.fail(l);
    }
    stack.keep_logs_of(&mut report, scenario);
    report
}

/// One `#[ignore]`d test (`make chaos`) per row: a row whose name says it cuts the
/// network ("partition", "powered off") runs through the partition harness (skipped,
/// saying why, without namespaces), the others through [`run`].
macro_rules! rows {
    ($($test:ident: $name:literal => $body:expr;)*) => {$(
        #[test]
        #[ignore = "chaos: make chaos"]
        fn $test() {
            if $name.contains("partition") || $name.contains("powered off") {
                crate::partition::run($name, $body);
            } else {
                crate::harness::run($name, $body);
            }
        }
    )*};
}
pub(crate) use rows;
