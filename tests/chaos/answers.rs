//! One client's answers to a keyed request, as the lifecycle matrix and the rolling
//! restart send them ([`send`], [`retrier`]), and the judgement of a key's answers
//! against the one it stores ([`judge`]): every whole answer a client got must be the
//! stored one, byte for byte; a cut or a "retry" answer is never wrong.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::checker::Report;

/// A retrier gives up this long after it started.
pub const RETRY_BOUND: Duration = Duration::from_secs(40);
/// The tenant of every key (the chaos fleet scopes keys by `Authorization`).
pub const TENANT: &str = "Bearer tenant-lifecycle";

/// What a client sends for a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// A keyed payment whose upstream works `work_ms`; `detach`: the upstream acts even
    /// when the gateway hangs up first (else it drops the call, acting nothing).
    Payment { work_ms: u64, detach: bool },
    /// A streaming completion (Server-Sent Events, a token every 100 ms for `work_ms`).
    Stream { work_ms: u64 },
}

/// One client's answer.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A whole answer the key may store: a 2xx, or a stored problem.
    Whole {
        status: u16,
        replayed: bool,
        body: Bytes,
    },
    /// Told to retry, or cut: never wrong.
    Retry(String),
}

/// Sends the key's `call` to `base`.
pub async fn send(http: &reqwest::Client, base: &str, key: &str, call: Call) -> Answer {
    let (path, body) = match call {
        Call::Stream { work_ms } => (
            "/v1/completions".to_string(),
            format!(
                r#"{{"stream":true,"max_tokens":{},"token_ms":100}}"#,
                work_ms / 100
            ),
        ),
        Call::Payment { work_ms, detach } => (
            format!("/v1/payments?latency_ms={work_ms}&detach={detach}"),
            r#"{"amount":1,"currency":"eur"}"#.to_string(),
        ),
    };
    let sent = http
        .post(format!("{base}{path}"))
        .header("Idempotency-Key", key)
        .header("Authorization", TENANT)
        .header("Content-Type", "application/json")
        .body(body)
        .timeout(Duration::from_secs(30))
        .send()
        .await;
    let response = match sent {
        Ok(r) => r,
        Err(e) => return Answer::Retry(format!("no answer: {e}")),
    };
    let status = response.status().as_u16();
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    let body = match response.bytes().await {
        Ok(body) => body,
        Err(e) => return Answer::Retry(format!("{status}, cut: {e}")),
    };
    let code = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("code")?.as_str().map(str::to_string));
    let stored_problem = matches!(
        code.as_deref(),
        Some("upstream_outcome_unknown" | "upstream_response_too_large")
    );
    match (200..300).contains(&status) || stored_problem {
        true => Answer::Whole {
            status,
            replayed,
            body,
        },
        false => Answer::Retry(format!("{status} {}", code.unwrap_or_default())),
    }
}

/// Retries the key through `front` until a replay, or [`RETRY_BOUND`]: every answer.
pub async fn retrier(http: reqwest::Client, front: String, key: String, call: Call) -> Vec<Answer> {
    let deadline = Instant::now() + RETRY_BOUND;
    let mut answers = Vec::new();
    while Instant::now() < deadline {
        let answer = send(&http, &front, &key, call).await;
        let replayed = matches!(answer, Answer::Whole { replayed: true, .. });
        answers.push(answer);
        if replayed {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    answers
}

/// Executions per key (more than one is MEASURED within `window`, the documented
/// reason, else FAIL), and every whole answer against the key's stored one.
pub fn judge(
    report: &mut Report,
    window: Option<&str>,
    keys: &[String],
    answers: &[Vec<Answer>],
    ledger: &HashMap<String, u64>,
) {
    let (mut cuts, mut wholes) = (BTreeMap::new(), 0);
    for (key, answers) in keys.iter().zip(answers) {
        let runs = ledger.get(key).copied().unwrap_or(0);
        report.executions += runs;
        if runs > 1 {
            report.duplicates += runs - 1;
            let why = format!("{key} ran {runs} times");
            match window {
                Some(_) => report.measured.push(why),
                None => report.fail(why),
            }
        }
        // The stored answer: the last replay a retrier got.
        let stored = answers.iter().rev().find_map(|a| match a {
            Answer::Whole {
                status,
                replayed: true,
                body,
            } => Some((*status, body.clone())),
            _ => None,
        });
        let Some((status, body)) = stored else {
            report.lost += 1;
            report.fail(format!(
                "{key}: no replay within {RETRY_BOUND:?}: {answers:?}"
            ));
            continue;
        };
        for answer in answers {
            match answer {
                Answer::Retry(why) => {
                    let why = why.split(':').next().unwrap_or_default().to_string();
                    *cuts.entry(why).or_insert(0) += 1;
                }
                Answer::Whole { status: s, body: b, .. } if (*s, b) == (status, &body) => wholes += 1,
                Answer::Whole { status: s, body: b, replayed } => report.fail(format!(
                    "{key}: a client got {s} (replayed {replayed}) {:?}, the key stores {status} {:?}",
                    String::from_utf8_lossy(&b[..b.len().min(120)]),
                    String::from_utf8_lossy(&body[..body.len().min(120)]),
                )),
            }
        }
    }
    report.notes.push(format!(
        "answers: {wholes} whole and the stored one; cut or told to retry: {cuts:?}"
    ));
    if let Some(window) = window.filter(|_| report.duplicates > 0) {
        report.notes.push(window.to_string());
    }
}
