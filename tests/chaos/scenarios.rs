//! The scenarios: each starts its own fleet, runs the driver through HAProxy (unless
//! said otherwise), injects its fault mid-run, heals, and hands over to the checker.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::prelude::{Builder, ClientLike, Config as FredConfig, KeysInterface};

use crate::checker::{Expect, Report};
use crate::cluster::{config_accepted, Durability, Options, Probe, Stack};
use crate::driver::{self, Exchange, Got, KeyClass, Phase, Plan, Req, Workload};
use crate::faultproxy::Fault;
use crate::harness::{finish, start, Running};

const EXACTLY_ONCE: Expect = Expect {
    exactly_once: true,
    durable: true,
};

/// Exactly once only with `claims = "write_through"`; durable unless Redis-only.
fn expect_for(d: Durability) -> Expect {
    Expect {
        exactly_once: d.claims_durable(),
        durable: d != Durability::RedisOnly,
    }
}

fn options(d: Durability) -> Options {
    Options {
        durability: d,
        ..Options::default()
    }
}

/// Keys spend 50-250 ms in the upstream, so many leases are live when the fault hits.
fn in_flight_heavy(scenario: &str, stack: &Stack) -> Workload {
    let mut w = Workload::new(scenario, vec![stack.front()]);
    w.shape = Arc::new(|n| (format!("?latency_ms={}", 50 + n % 5 * 50), KeyClass::Normal));
    w
}

/// Redis restarted (SIGKILL, no persistence) mid-load: every key, lease and stored
/// response in Redis is gone.
pub async fn redis_restart(name: String, d: Durability) -> Report {
    let mut stack = Stack::start(options(d)).await;
    let mut run = start(in_flight_heavy(&name, &stack));
    run.at(3000).await;
    stack.redis.restart_empty();
    let plans = run.plans().await;
    finish(&name, &mut stack, &run, &plans, expect_for(d)).await
}

/// Redis paused past the command timeout: `CLIENT PAUSE 2000 ALL`, then `DEBUG SLEEP 2`.
pub async fn redis_pause(name: String, d: Durability) -> Report {
    let mut stack = Stack::start(options(d)).await;
    let mut run = start(in_flight_heavy(&name, &stack));
    run.at(2500).await;
    let paused = stack.redis.cli(&["CLIENT", "PAUSE", "2000", "ALL"]);
    assert_eq!(paused.trim(), "OK", "CLIENT PAUSE: {paused}");
    run.at(5000).await;
    let port = stack.redis.port;
    let sleeper = std::thread::spawn(move || {
        std::process::Command::new("redis-cli")
            .args(["-p", &port.to_string(), "DEBUG", "SLEEP", "2"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    });
    let plans = run.plans().await;
    let slept = sleeper.join().unwrap().unwrap_or_default();
    let mut report = finish(&name, &mut stack, &run, &plans, expect_for(d)).await;
    if slept != "OK" {
        report.fail(format!("DEBUG SLEEP did not run: {slept:?}"));
    }
    report
        .notes
        .push(format!("breaker trips {}", breaker_trips(&stack)));
    report
}

/// Redis killed and kept down 3 s, then back with its data (AOF, fsync always).
pub async fn redis_down(name: String, d: Durability) -> Report {
    let mut opts = options(d);
    opts.redis_args = ["--appendonly", "yes", "--appendfsync", "always"]
        .map(String::from)
        .to_vec();
    let mut stack = Stack::start(opts).await;
    let mut run = start(in_flight_heavy(&name, &stack));
    run.at(2500).await;
    let killed = Instant::now();
    stack.redis.stop();
    run.at(5500).await;
    stack.redis.start_again();
    // Back with its data, but a new process: the markers loaded from the AOF vouch for
    // nothing (claims in Redis with Postgres behind: the only mode that reads them).
    let markers = if d == Durability::Postgres {
        let url = stack.redis.url();
        Some(
            crate::failover::markers_vouching_across(&url, &[(0, 16383)], killed.elapsed(), 300)
                .await,
        )
    } else {
        None
    };
    let plans = run.plans().await;
    let mut report = finish(&name, &mut stack, &run, &plans, expect_for(d)).await;
    crate::failover::markers_note(&mut report, markers);
    report
        .notes
        .push(format!("breaker trips {}", breaker_trips(&stack)));
    report
}

fn breaker_trips(stack: &Stack) -> usize {
    stack.logs().matches("redis failing: claims follow").count()
}

/// Postgres stopped during write-through for 3 s, then back.
pub async fn postgres_stopped(name: String, d: Durability) -> Report {
    let mut stack = Stack::start(options(d)).await;
    let mut run = start(in_flight_heavy(&name, &stack));
    run.at(2500).await;
    stack.pg.as_mut().unwrap().stop();
    run.at(5500).await;
    stack.pg.as_mut().unwrap().restart();
    let plans = run.plans().await;
    // Redis keeps claiming and serving; durable copies queue until Postgres is back.
    let mut report = finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await;
    let queued = stack.logs().matches("durable copy queued").count();
    let failures = stack
        .metric_sum("idemgate_write_through_failures_total")
        .await;
    let dropped = stack
        .metric_sum("idemgate_write_through_dropped_total")
        .await;
    report.notes.push(format!(
        "queued {queued}, failed statements {failures}, dropped {dropped}"
    ));
    if dropped > 0.0 {
        report.fail(format!("{dropped} durable copies dropped"));
    }
    report
}

/// Postgres slow: `LOCK TABLE idemgate_records IN ACCESS EXCLUSIVE MODE` held in an open
/// transaction for 3 s (statement_timeout is 1 s).
pub async fn postgres_slow(name: String, d: Durability) -> Report {
    let mut stack = Stack::start(options(d)).await;
    let mut run = start(in_flight_heavy(&name, &stack));
    run.at(2500).await;
    let locker = stack.pg.as_ref().unwrap().client().await;
    locker
        .batch_execute("BEGIN; LOCK TABLE idemgate_records IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("lock the table");
    run.at(5500).await;
    locker
        .batch_execute("COMMIT")
        .await
        .expect("release the lock");
    let plans = run.plans().await;
    let mut report = finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await;
    let failures = stack
        .metric_sum("idemgate_write_through_failures_total")
        .await;
    report.notes.push(format!("failed statements {failures}"));
    report
}

/// Load through the front with upstream calls of 200-600 ms, run for 3 s, so that a
/// replica fault lands on calls in flight. Returns the run and replica 1's calls in
/// flight at that moment (-1 if unknown).
async fn calls_in_flight(stack: &Stack, name: &str) -> (Running, f64) {
    let mut w = Workload::new(name, vec![stack.front()]);
    w.shape = Arc::new(|n| {
        (
            format!("?latency_ms={}", 200 + n % 5 * 100),
            KeyClass::Normal,
        )
    });
    w.workers = 30;
    let run = start(w);
    run.at(3000).await;
    let in_flight = stack.replicas[1]
        .metric(&stack.http, "idemgate_in_flight")
        .await
        .unwrap_or(-1.0);
    (run, in_flight)
}

/// A replica killed with SIGKILL while holding leases (upstream calls of 200-600 ms),
/// started again 3 s later. Its leases must hold until they run out (nothing extends
/// them after the kill), so every key runs once, except a key whose upstream call acted
/// just before the kill without its response being stored: that one may run again once
/// its lease is gone ([`cut_at_the_kill`]; a takeover, by design).
pub async fn replica_sigkill(name: String, d: Durability) -> Report {
    let opts = options(d);
    let lease = humantime::parse_duration(&opts.lock_ttl).expect("lock_ttl");
    let mut stack = Stack::start(opts).await;
    let (mut run, in_flight) = calls_in_flight(&stack, &name).await;
    let kill_ms = run.rec.start.elapsed().as_millis() as u64;
    stack.replicas[1].kill();
    run.at(6000).await;
    stack.replicas[1].start();
    let mut plans = run.plans().await;
    let cut = cut_at_the_kill(&run.rec.all(), &plans, kill_ms, lease);
    for plan in plans.iter_mut().filter(|p| cut.contains(&p.key)) {
        plan.class = KeyClass::Takeover;
    }
    let mut report = finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await;
    report.notes.push(format!(
        "victim held ~{in_flight} upstream calls; keys cut at the kill and first answered only \
         after their lease {}",
        cut.len()
    ));
    report
}

/// Keys of one tenant that the killed replica was serving and that ran again only once
/// its lease was surely gone. An exchange sent before the kill (`kill_ms`) ended in a
/// connection error within a second after it (`done_ms`, by when the victim was dead).
/// If the victim's upstream call acted, it did before the victim died (the demo upstream
/// acts `latency_ms` after the call arrives, and drops a call whose connection closed),
/// so the victim claimed the key no later than `done_ms - latency_ms`, and its lease
/// ended `lease` after that, or `lease` after `done_ms` when a heartbeat (every third of
/// `lease` from the call's start) could have been due before the kill. The key counts as
/// a takeover when it got at least one first-execution 2xx and each was sent at least
/// 50 ms after that end; a key run again sooner keeps its class, and its second
/// execution is a duplicate.
fn cut_at_the_kill(
    all: &[Exchange],
    plans: &[Plan],
    kill_ms: u64,
    lease: Duration,
) -> HashSet<String> {
    let lease_ms = lease.as_millis() as u64;
    let one_tenant = |key: &str| plans.iter().any(|p| p.key == key && p.reqs.len() == 1);
    let latency = |e: &Exchange| {
        (e.req.path.split("latency_ms=").nth(1))
            .and_then(|v| v.split('&').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let cut = all.iter().filter(|e| {
        e.phase == Phase::Load
            && matches!(e.got, Got::Error(_))
            && e.sent_ms <= kill_ms
            && (kill_ms..=kill_ms + 1000).contains(&e.done_ms)
            && one_tenant(&e.req.key)
    });
    cut.filter(|c| {
        let heartbeat_due = c.sent_ms + lease_ms / 3 <= c.done_ms;
        let claimed_by = if heartbeat_due {
            c.done_ms
        } else {
            c.done_ms.saturating_sub(latency(c))
        };
        let lease_end = claimed_by + lease_ms;
        let firsts: Vec<&Exchange> = (all.iter())
            .filter(|e| e.req.key == c.req.key)
            .filter(|e| matches!(&e.got, Got::Resp(r) if (200..300).contains(&r.status) && !r.is_replay()))
            .collect();
        !firsts.is_empty() && firsts.iter().all(|e| e.sent_ms >= lease_end + 50)
    })
    .map(|c| c.req.key.clone())
    .collect()
}

/// A replica stopped with SIGTERM mid-load: it must drain its in-flight calls within
/// `shutdown_grace` and exit; started again afterwards.
pub async fn replica_sigterm(name: String) -> Report {
    let mut stack = Stack::start(Options::default()).await;
    let (mut run, in_flight) = calls_in_flight(&stack, &name).await;
    let t = Instant::now();
    stack.replicas[1].signal("TERM");
    let mut exited = None;
    while t.elapsed() < Duration::from_secs(8) {
        if !stack.replicas[1].running() {
            exited = Some(t.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    run.at(7000).await;
    if exited.is_some() {
        stack.replicas[1].start();
    }
    let plans = run.plans().await;
    let mut report = finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await;
    let log = stack.replicas[1].log_text();
    match exited {
        Some(d) => report.notes.push(format!(
            "victim had ~{in_flight} calls in flight, drained and exited in {} ms",
            d.as_millis()
        )),
        None => report.fail("the SIGTERMed replica did not exit within 8 s"),
    }
    if !log.contains("shutting down") || !log.contains("stopped") {
        report.fail("the SIGTERMed replica did not log a graceful shutdown");
    }
    if log.contains("upstream calls still running after shutdown_grace") {
        report.fail("the SIGTERMed replica abandoned upstream calls");
    }
    report
}

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

/// A replica frozen with SIGSTOP past its lease while its upstream calls finish, then
/// SIGCONT: another replica takes the keys over, and the frozen one's late completion
/// must be refused (the stored response, in Redis and in Postgres, is the takeover's).
pub async fn replica_sigstop(name: String, d: Durability) -> Report {
    // The heartbeat lets the upstream call (1.5 s) outlive the lease (1 s); frozen, the
    // replica stops extending it, and resumes 3.5 s later with the answer waiting.
    let (lock, latency, stop_at, frozen) = ("1s", 1500u64, 300u64, 3500u64);
    let opts = Options {
        lock_ttl: lock.into(),
        upstream_timeout: "10s".into(),
        durability: d,
        ..Options::default()
    };
    if let Err(e) = config_accepted(&opts) {
        let mut r = Report {
            scenario: name,
            ..Default::default()
        };
        r.notes
            .push("not run: upstream_timeout > lock_ttl refused (no lease heartbeat)".into());
        r.fail(e);
        return r;
    }
    let lock_ms = humantime::parse_duration(lock).unwrap().as_millis() as u64;
    let mut stack = Stack::start(opts).await;
    // Background load on the two other replicas, directly: only the stale keys below
    // are held by the replica that gets frozen.
    let mut w = Workload::new(&name, stack.replica_urls()[1..].to_vec());
    w.duration = Duration::from_secs(6);
    w.workers = 12;
    let mut run = start(w);
    run.at(1000).await;

    let stale: Vec<Arc<Req>> = (0..6)
        .map(|i| {
            Arc::new(Req {
                tenant: i % 3,
                key: format!(
                    "{}-stale-{i}-t{}",
                    name.replace(['[', ']', '=', ' '], "_"),
                    i % 3
                ),
                path: format!("/v1/payments?latency_ms={latency}"),
                body: format!("{{\"amount\":{i},\"currency\":\"eur\"}}"),
            })
        })
        .collect();
    let victim = stack.replicas[0].url();
    let lost_before = stack.replicas[0]
        .metric(&stack.http, "idemgate_lease_lost_total")
        .await
        .unwrap_or(0.0);
    // The frozen replica's own clients wait for their answers.
    let holders: Vec<_> = stale
        .iter()
        .map(|req| {
            let (rec, http, victim, req) = (
                run.rec.clone(),
                run.http.clone(),
                victim.clone(),
                req.clone(),
            );
            tokio::spawn(async move {
                rec.send(&http, &victim, &req, Duration::from_secs(30), Phase::Load)
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(stop_at)).await;
    stack.replicas[0].signal("STOP");
    let stopped = Instant::now();
    // Retries through the front once the lease has expired: another replica takes over.
    tokio::time::sleep(Duration::from_millis(lock_ms + 200)).await;
    driver::resend_all(
        run.rec.clone(),
        run.http.clone(),
        stack.front(),
        stale.clone(),
        Phase::Load,
        Duration::from_secs(10),
        8,
    )
    .await;
    let left = Duration::from_millis(frozen).saturating_sub(stopped.elapsed());
    tokio::time::sleep(left).await;
    stack.replicas[0].signal("CONT");
    let frozen_for = stopped.elapsed();
    let mut holder_got = Vec::new();
    for h in holders {
        holder_got.push(h.await.unwrap());
    }
    if d.claims_durable() {
        // A key answered 502 is not acknowledged, so the harness's final passes skip
        // it: one retry each instead, which must replay the stored outcome.
        for req in &stale {
            (run.rec)
                .send(
                    &run.http,
                    &stack.front(),
                    req,
                    Duration::from_secs(10),
                    Phase::Final,
                )
                .await;
        }
    }
    let mut plans = run.plans().await;
    plans.extend(stale.iter().map(|r| Plan {
        key: r.key.clone(),
        class: KeyClass::Takeover,
        reqs: vec![r.clone()],
    }));
    let mut report = finish(&name, &mut stack, &run, &plans, EXACTLY_ONCE).await;

    // The stored response of each stale key is the takeover's: the first answer a retry
    // through the front got, replayed by the final passes (Redis, then Postgres). Where
    // a lapsed lease is remembered (durable claims: a Postgres row, or a vouched record
    // that outlives its lease), the takeover runs nothing and stores the unknown outcome
    // (502, `on_ambiguous = "store"`); elsewhere it runs the key (2xx).
    let answered = |status: u16| match d.claims_durable() {
        true => status == 502,
        false => (200..300).contains(&status),
    };
    let all = run.rec.all();
    let mut refused_ok = 0;
    for req in &stale {
        let mine: Vec<_> = all.iter().filter(|e| Arc::ptr_eq(&e.req, req)).collect();
        let takeover = mine.iter().find_map(|e| match &e.got {
            driver::Got::Resp(r)
                if !r.is_replay()
                    && answered(r.status)
                    && e.phase == Phase::Load
                    && e.sent_ms > stopped.duration_since(run.t0).as_millis() as u64 =>
            {
                Some(r.clone())
            }
            _ => None,
        });
        let Some(takeover) = takeover else {
            report.fail(format!(
                "{}: no takeover execution was acknowledged",
                req.key
            ));
            continue;
        };
        let mut ok = true;
        let passes = match d.claims_durable() {
            true => &[Phase::Final][..],
            false => &[Phase::Final, Phase::Durable],
        };
        for &phase in passes {
            let last = mine.iter().rev().find(|e| e.phase == phase);
            match last.map(|e| &e.got) {
                Some(driver::Got::Resp(r)) if r.is_replay() && r.same_as(&takeover) => {}
                other => {
                    ok = false;
                    report.fail(format!(
                        "{}: {phase:?} pass does not replay the takeover's response: {:?}",
                        req.key,
                        other.map(|g| match g {
                            driver::Got::Resp(r) =>
                                format!("{} exec {:?}", r.status, r.execution()),
                            g => format!("{g:?}"),
                        })
                    ));
                }
            }
        }
        if ok {
            refused_ok += 1;
        }
    }
    let lost_after = stack.replicas[0]
        .metric(&stack.http, "idemgate_lease_lost_total")
        .await
        .unwrap_or(0.0);
    let refusals = lost_after - lost_before;
    let holder_summary: Vec<String> = holder_got
        .iter()
        .map(|g| match g {
            driver::Got::Resp(r) => format!(
                "{}{}{}",
                r.status,
                if r.is_replay() { " replay" } else { "" },
                r.execution()
                    .map(|(n, _)| format!(" exec#{n}"))
                    .or(r.problem_code().map(|c| format!(" {c}")))
                    .unwrap_or_default()
            ),
            g => format!("{g:?}"),
        })
        .collect();
    let stale_acks = holder_got
        .iter()
        .filter(|g| matches!(g, driver::Got::Resp(r) if !r.is_replay() && (200..300).contains(&r.status)))
        .count();
    report.notes.push(format!(
        "frozen {} ms; stored = takeover's for {refused_ok}/{}; stale completions refused {refusals}",
        frozen_for.as_millis(),
        stale.len()
    ));
    report.details.push(format!(
        "frozen replica's own clients got: {}",
        holder_summary.join(", ")
    ));
    if refusals < 1.0 {
        report.fail(format!(
            "no late completion was refused (lease_lost +{refusals}); the frozen replica's clients got {holder_summary:?}"
        ));
    }
    if stale_acks > 0 {
        report.notes.push(format!(
            "frozen replica answered {stale_acks} of its own clients 2xx with its unstored execution"
        ));
    }
    report
}

/// One replica cut off from Redis through the fault proxy: latency 500 ms (past the
/// 300 ms command timeout) for 2 s, black hole for 2 s, resets for 1.5 s, then healed.
pub async fn replica_cut_off(name: String, d: Durability) -> Report {
    let mut opts = options(d);
    opts.via_fault_proxy = vec![0];
    let mut stack = Stack::start(opts).await;
    let mut run = start(in_flight_heavy(&name, &stack));
    let fault = stack.fault.as_ref().unwrap();
    run.at(2000).await;
    fault.set(Fault::Latency(Duration::from_millis(500)));
    run.at(4000).await;
    fault.set(Fault::BlackHole);
    run.at(6000).await;
    fault.set(Fault::Reset);
    run.at(7500).await;
    fault.set(Fault::Pass);
    let plans = run.plans().await;
    let mut report = finish(&name, &mut stack, &run, &plans, expect_for(d)).await;
    let fallbacks = stack.replicas[0]
        .metric(&stack.http, "idemgate_fallback_total")
        .await
        .unwrap_or(-1.0);
    report.notes.push(format!(
        "cut-off replica: breaker trips {}, fallbacks {fallbacks}",
        stack.replicas[0]
            .log_text()
            .matches("redis failing: claims follow")
            .count()
    ));
    report
}

/// Redis under `maxmemory 2mb` with `allkeys-lru` while a filler writes junk: leases and
/// stored responses get evicted. The gateway must warn at start-up.
pub async fn redis_maxmemory(name: String, d: Durability) -> Report {
    let mut opts = options(d);
    opts.redis_args = ["--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"]
        .map(String::from)
        .to_vec();
    let mut stack = Stack::start(opts).await;
    let mut run = start(in_flight_heavy(&name, &stack));
    let filler = {
        let url = stack.redis.url();
        let t0 = run.t0;
        tokio::spawn(async move {
            let client = Builder::from_config(FredConfig::from_url(&url).unwrap())
                .build()
                .unwrap();
            client.init().await.unwrap();
            let junk = "x".repeat(2048);
            let mut i = 0u64;
            while t0.elapsed() < Duration::from_secs(8) {
                for _ in 0..20 {
                    let _: Result<(), _> = client
                        .set(format!("junk:{i}"), junk.as_str(), None, None, false)
                        .await;
                    i += 1;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let _ = client.quit().await;
            i
        })
    };
    let plans = run.plans().await;
    let junk = filler.await.unwrap_or(0);
    let evicted = stack.redis.info("evicted_keys").unwrap_or_default();
    let mut report = finish(&name, &mut stack, &run, &plans, expect_for(d)).await;
    let warned = stack
        .replicas
        .iter()
        .filter(|r| r.log_text().contains("maxmemory-policy is not noeviction"))
        .count();
    report.notes.push(format!(
        "{junk} junk keys, evicted {evicted}, start-up warning in {warned}/{} logs",
        stack.replicas.len()
    ));
    if warned != stack.replicas.len() {
        report.fail("the start-up maxmemory-policy warning is missing from a replica's log");
    }
    if evicted.parse::<u64>().unwrap_or(0) == 0 {
        report.fail("nothing was evicted: the scenario did not exercise eviction");
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

#[cfg(test)]
mod cut_at_the_kill_tests {
    use bytes::Bytes;

    use super::*;

    const LEASE: Duration = Duration::from_secs(3);
    const KILL_MS: u64 = 3005;

    fn req(key: &str) -> Arc<Req> {
        Arc::new(Req {
            tenant: 2,
            key: key.into(),
            path: "/v1/payments?latency_ms=400".into(),
            body: String::new(),
        })
    }

    fn answer(status: u16, replayed: bool) -> Got {
        Got::Resp(driver::Resp {
            status,
            replayed: replayed.then(|| "true".to_string()),
            headers: Vec::new(),
            body: Bytes::new(),
        })
    }

    fn at(req: &Arc<Req>, sent_ms: u64, done_ms: u64, got: Got) -> Exchange {
        Exchange {
            req: req.clone(),
            phase: Phase::Load,
            sent_ms,
            done_ms,
            got,
        }
    }

    /// The failing run's key: sent to the victim at 2,601 ms (upstream 400 ms), cut at
    /// the kill, 409s until its lease ran out, then run again by a retry.
    fn timeline(retry_sent_ms: u64, cut_sent_ms: u64) -> (Vec<Exchange>, Vec<Plan>) {
        let r = req("k");
        let all = vec![
            at(
                &r,
                cut_sent_ms,
                3008,
                Got::Error("connection closed".into()),
            ),
            at(&r, 3066, 3070, answer(409, false)),
            at(&r, retry_sent_ms, retry_sent_ms + 404, answer(201, false)),
            at(&r, 8682, 8684, answer(201, true)),
        ];
        let plans = vec![Plan {
            key: "k".into(),
            class: KeyClass::Normal,
            reqs: vec![r],
        }];
        (all, plans)
    }

    #[test]
    fn a_key_run_again_after_its_lease_is_a_takeover() {
        let (all, plans) = timeline(5772, 2601);
        assert!(cut_at_the_kill(&all, &plans, KILL_MS, LEASE).contains("k"));
    }

    #[test]
    fn a_key_run_again_while_its_lease_may_hold_stays_a_duplicate() {
        // Before claim + lease (2,608 + 3,000) plus the margin.
        let (all, plans) = timeline(5600, 2601);
        assert!(cut_at_the_kill(&all, &plans, KILL_MS, LEASE).is_empty());
        // Sent 1.5 s before the kill: a heartbeat may have extended the lease to the
        // kill plus `lease`.
        let (all, plans) = timeline(5772, 1500);
        assert!(cut_at_the_kill(&all, &plans, KILL_MS, LEASE).is_empty());
    }

    #[test]
    fn replays_alone_or_another_tenant_do_not_make_a_takeover() {
        let (mut all, plans) = timeline(5772, 2601);
        all.remove(2);
        assert!(cut_at_the_kill(&all, &plans, KILL_MS, LEASE).is_empty());
        let (all, mut plans) = timeline(5772, 2601);
        plans[0].reqs.push(req("k"));
        assert!(cut_at_the_kill(&all, &plans, KILL_MS, LEASE).is_empty());
    }
}
