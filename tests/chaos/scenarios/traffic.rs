//! Faults at the edges of a call: clients that hang up, upstreams that are slow, answer
//! 5xx or reset, and many clients on one hot key.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::EXACTLY_ONCE;
use crate::checker::{Expect, Report};
use crate::cluster::{config_accepted, Options, Stack};
use crate::driver::{self, KeyClass, Phase, Plan, Req, Workload};
use crate::harness::{finish, start};

/// Clients disconnecting mid-request: 40% of attempts give up after 100 ms while the
/// upstream takes 150-400 ms; attempts go round robin over HAProxy and the replicas
/// directly (so the gateway itself sees the hang-ups); plus clients that hang up in the
/// middle of sending their body (which must claim nothing).
pub async fn client_disconnect(name: String, seconds: u64) -> Report {
    let mut stack = Stack::start(Options::default()).await;
    let mut targets = vec![stack.front()];
    targets.extend(stack.replica_urls());
    let mut w = Workload::new(&name, targets);
    w.duration = Duration::from_secs(seconds);
    w.disconnect = Some((0.4, Duration::from_millis(100)));
    w.shape = Arc::new(|n| {
        (
            format!("?latency_ms={}", 150 + n % 6 * 50),
            KeyClass::Normal,
        )
    });
    let mut run = start(w);
    // Partial uploads, each followed by the complete request through the front.
    let partial: Vec<Arc<Req>> = (0..30)
        .map(|i| {
            Arc::new(Req {
                tenant: i % 3,
                key: format!(
                    "{}-partial-{i}-t{}",
                    name.replace(['[', ']', '=', ' '], "_"),
                    i % 3
                ),
                path: "/v1/payments?latency_ms=50".into(),
                body: format!("{{\"amount\":{i},\"currency\":\"eur\"}}"),
            })
        })
        .collect();
    run.at(1000).await;
    for (i, req) in partial.iter().enumerate() {
        let addr = format!("127.0.0.1:{}", stack.replicas[i % 3].port);
        driver::partial_upload(&run.rec, &addr, req).await;
    }
    driver::resend_all(
        run.rec.clone(),
        run.http.clone(),
        stack.front(),
        partial.clone(),
        Phase::Load,
        Duration::from_secs(10),
        8,
    )
    .await;
    let mut plans = run.plans().await;
    plans.extend(partial.iter().map(|r| Plan {
        key: r.key.clone(),
        class: KeyClass::Normal,
        reqs: vec![r.clone()],
    }));
    let mut report = finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await;
    let claimed_by_partial: Vec<String> = run
        .rec
        .all()
        .iter()
        .filter(|e| partial.iter().any(|p| Arc::ptr_eq(p, &e.req)))
        .filter(|e| matches!(&e.got, driver::Got::Resp(r) if r.status == 409))
        .map(|e| e.req.key.clone())
        .collect();
    if !claimed_by_partial.is_empty() {
        report.fail(format!(
            "a request whose body never arrived held its key (409 for {claimed_by_partial:?})"
        ));
    }
    report
        .notes
        .push(format!("{} partial uploads", partial.len()));
    report
}

/// Upstream slower than the lease (`latency_ms` 2.5 s, `lock_ttl` 1 s, upstream_timeout
/// 5 s), every key sent by three clients retrying on 409: the lease heartbeat must keep
/// the duplicates out. Without the heartbeat this configuration is refused.
pub async fn upstream_slow(name: String) -> Report {
    let opts = Options {
        lock_ttl: "1s".into(),
        upstream_timeout: "5s".into(),
        ..Options::default()
    };
    if let Err(e) = config_accepted(&opts) {
        let mut r = Report {
            scenario: name,
            ..Default::default()
        };
        r.notes
            .push("not run: upstream_timeout > lock_ttl refused (no lease heartbeat)".into());
        r.fail(format!(
            "lock_ttl 1s with upstream_timeout 5s is refused: {e}"
        ));
        return r;
    }
    let mut stack = Stack::start(opts).await;
    let mut w = Workload::new(&name, vec![stack.front()]);
    w.duration = Duration::from_secs(5);
    w.workers = 24;
    w.dup_ratio = 1.0;
    w.attempt_timeout = Duration::from_secs(6);
    w.key_deadline = Duration::from_secs(15);
    w.shape = Arc::new(|n| {
        (
            format!("?latency_ms={}", if n % 2 == 0 { 2500 } else { 1500 }),
            KeyClass::Normal,
        )
    });
    let mut run = start(w);
    let plans = run.plans().await;
    let mut report = finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await;
    let lost = stack.metric_sum("idemgate_lease_lost_total").await;
    report.notes.push(format!("lease lost {lost}"));
    report
}

/// Upstream failing with 5xx: 30% of calls answer 503 without acting (released, the
/// client retries), and every tenth key always gets `?status=503` (never executes,
/// never stored).
pub async fn upstream_5xx(name: String, seconds: u64) -> Report {
    let opts = Options {
        upstream_env: vec![("DEMO_FAIL_RATE".into(), "0.3".into())],
        ..Options::default()
    };
    let mut stack = Stack::start(opts).await;
    let mut w = Workload::new(&name, vec![stack.front()]);
    w.duration = Duration::from_secs(seconds);
    w.max_attempts = 10;
    w.shape = Arc::new(|n| {
        if n % 10 == 0 {
            ("?status=503".into(), KeyClass::NeverExecutes)
        } else {
            (format!("?latency_ms={}", 20 + n % 4 * 30), KeyClass::Normal)
        }
    });
    let mut run = start(w);
    let plans = run.plans().await;
    finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await
}

/// Upstream resetting the connection after acting (20% of calls). With
/// `on_ambiguous = "release"` (the default) a retry runs again: measured. With
/// `"store"` the 502 `upstream_outcome_unknown` is stored and replayed: exactly once.
pub async fn upstream_reset(name: String, on_ambiguous: &str) -> Report {
    let mut opts = Options {
        upstream_env: vec![("DEMO_RESET_RATE".into(), "0.2".into())],
        ..Options::default()
    };
    let supported = config_accepted(&Options {
        idempotency: "on_ambiguous = \"release\"".into(),
        ..Options::default()
    })
    .is_ok();
    if supported {
        opts.idempotency = format!("on_ambiguous = \"{on_ambiguous}\"");
    } else if on_ambiguous == "store" {
        let mut r = Report {
            scenario: name,
            ..Default::default()
        };
        r.notes.push("not run: on_ambiguous not supported".into());
        r.fail("on_ambiguous = \"store\" is refused by this build");
        return r;
    }
    let mut stack = Stack::start(opts).await;
    let mut w = Workload::new(&name, vec![stack.front()]);
    w.duration = Duration::from_secs(6);
    w.shape = Arc::new(|n| (format!("?latency_ms={}", 20 + n % 4 * 30), KeyClass::Normal));
    let mut run = start(w);
    let plans = run.plans().await;
    let expect = Expect {
        exactly_once: on_ambiguous == "store",
        durable: true,
    };
    let mut report = finish(&name, &mut stack, &run, &plans, expect).await;
    if !supported {
        report
            .notes
            .push("on_ambiguous not in this build: default behaviour".into());
    }
    report
}

/// 1,000 concurrent identical requests on one key (through HAProxy), each client
/// retrying on 409 until it gets the replay. With `wait`, duplicates wait for the
/// holder (`in_flight = "wait"`, up to 1,000 waiters) instead of getting 409.
pub async fn hot_key(name: String, wait: bool) -> Report {
    let mut opts = Options::default();
    if wait {
        opts.idempotency = "in_flight = \"wait\"\nwait_timeout = \"5s\"\nmax_waiters = 1000".into();
        if let Err(e) = config_accepted(&opts) {
            let mut r = Report {
                scenario: name,
                ..Default::default()
            };
            r.notes
                .push("not run: in_flight = \"wait\" not supported".into());
            r.fail(e);
            return r;
        }
    }
    let mut stack = Stack::start(opts).await;
    let req = Arc::new(Req {
        tenant: 0,
        key: format!("{}-hot", name.replace(['[', ']', '=', ' ', ','], "_")),
        path: "/v1/payments?latency_ms=300".into(),
        body: "{\"amount\":1000,\"currency\":\"eur\"}".into(),
    });
    let mut w = Workload::new(&name, vec![stack.front()]);
    w.duration = Duration::ZERO; // no background keys
    let mut run = start(w);
    let _ = run.plans().await;
    let rec = run.rec.clone();
    let http = driver::client();
    let front = stack.front();
    let barrier = Arc::new(tokio::sync::Barrier::new(1000));
    let clients: Vec<_> = (0..1000)
        .map(|_| {
            let (rec, http, front, req, barrier) = (
                rec.clone(),
                http.clone(),
                front.clone(),
                req.clone(),
                barrier.clone(),
            );
            tokio::spawn(async move {
                barrier.wait().await;
                let first = Instant::now();
                loop {
                    let got = rec
                        .send(&http, &front, &req, Duration::from_secs(10), Phase::Load)
                        .await;
                    if !driver::retryable(&got) || first.elapsed() > Duration::from_secs(20) {
                        return;
                    }
                    let backoff = 100 + rand::random::<u64>() % 200;
                    tokio::time::sleep(Duration::from_millis(backoff)).await;
                }
            })
        })
        .collect();
    for c in clients {
        let _ = c.await;
    }
    let plans = vec![Plan {
        key: req.key.clone(),
        class: KeyClass::Normal,
        reqs: vec![req.clone()],
    }];
    let mut report = finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await;
    let all = run.rec.all();
    let firsts = all
        .iter()
        .filter(|e| matches!(&e.got, driver::Got::Resp(r) if !r.is_replay() && r.status == 201))
        .count();
    let replays = all
        .iter()
        .filter(|e| e.phase == Phase::Load)
        .filter(|e| matches!(&e.got, driver::Got::Resp(r) if r.is_replay()))
        .count();
    report.notes.push(format!(
        "1000 clients: {firsts} first execution, {replays} replays"
    ));
    if firsts != 1 {
        report.fail(format!("{firsts} first executions answered (expected 1)"));
    }
    if replays != 999 {
        report.fail(format!(
            "{replays} clients ended with a replay (expected 999)"
        ));
    }
    report
}
