//! A rolling restart of every replica through HAProxy under load: clients send keyed
//! slow calls (1.5 s of upstream work), live streams (2 s) and calls slower than the
//! stop's grace (6 s, against 4 s) through the front, each retrying its key until it
//! gets a replay, while the replicas are stopped (SIGTERM), started again and waited
//! for, one after another, as a deploy does. Every key must run once and end stored
//! (the calls a stop cut off: as unknown outcomes), and every whole answer any client
//! got must be the stored one ([`answers::judge`]). The claim mode is the lifecycle
//! matrix's ([`lifecycle::durability`]: the default, or `LIFECYCLE_CLAIMS`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::answers::{self, Answer, Call};
use crate::checker::Report;
use crate::cluster::{Options, Probe, Stack};
use crate::lifecycle;

/// Concurrent clients, each sending one new key after another.
const CLIENTS: usize = 16;

pub async fn rolling_restart(name: String) -> Report {
    let opts = Options {
        durability: lifecycle::durability(),
        lock_ttl: "3s".into(),
        shutdown_grace: "4s".into(),
        command_timeout: "500ms".into(),
        upstream_timeout: "30s".into(),
        ..Options::default()
    };
    let mut stack = Stack::start(opts).await;
    let http = reqwest::Client::new();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (http, front, stop) = (http.clone(), stack.front(), stop.clone());
            tokio::spawn(async move {
                let mut keys = Vec::new();
                for n in 0.. {
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    let key = format!("rolling-{c}-{n}");
                    let call = match (c + n) % 3 {
                        0 => Call::Payment {
                            work_ms: 1500,
                            detach: true,
                        },
                        1 => Call::Stream { work_ms: 2000 },
                        _ => Call::Payment {
                            work_ms: 6000,
                            detach: true,
                        },
                    };
                    let answers = answers::retrier(http.clone(), front.clone(), key.clone(), call);
                    keys.push((key, answers.await));
                }
                keys
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut notes = Vec::new();
    for i in 0..stack.replicas.len() {
        let termed = Instant::now();
        let exited = lifecycle::stop(&mut stack, i).await;
        stack.replicas[i].start();
        let ready = stack.replicas[i]
            .wait_ready(&stack.http, Duration::from_secs(20))
            .await;
        notes.push(format!(
            "replica {i}: exited {} ms after SIGTERM, ready {} ms after ({ready})",
            exited.as_millis(),
            (termed.elapsed() - exited).as_millis()
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stop.store(true, Ordering::Release);
    let (mut keys, mut answers): (Vec<String>, Vec<Vec<Answer>>) = (Vec::new(), Vec::new());
    for client in clients {
        for (key, got) in client.await.unwrap_or_default() {
            keys.push(key);
            answers.push(got);
        }
    }
    // The upstream's work that outlived its caller acts before the ledger is read.
    tokio::time::sleep(Duration::from_millis(6500)).await;
    let ledger = stack.ledger().await;
    let mut report = Report {
        scenario: name.clone(),
        requests: answers.iter().map(Vec::len).sum(),
        ..Default::default()
    };
    answers::judge(&mut report, None, &keys, &answers, &ledger.keys);
    report.notes.push(format!(
        "{} keys: a third each slow calls, live streams and calls slower than the grace; \
         {} answered as unknown outcomes",
        keys.len(),
        unknown(&answers)
    ));
    report.notes.extend(notes);
    if report.verdict() == "FAIL" {
        stack.keep_logs_of(&mut report, &name);
    }
    report
}

/// Keys whose stored answer is the problem of a call a stop cut off.
fn unknown(answers: &[Vec<Answer>]) -> usize {
    let cut_off = |a: &Answer| match a {
        Answer::Whole { status, body, .. } => {
            *status == 502 && String::from_utf8_lossy(body).contains("upstream_outcome_unknown")
        }
        Answer::Retry(_) => false,
    };
    answers.iter().filter(|a| a.iter().any(cut_off)).count()
}
