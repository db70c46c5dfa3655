//! The completer: a request abandoned partway (its replica SIGKILLed while
//! the upstream works, its client gone for good) is sent again by the completer, once,
//! with the same key and a higher fencing token, and a later retry replays what it
//! stored; without the completer nothing happens until a retry, which stores the unknown
//! outcome rather than run the key again. A client's retry and
//! the completer taking the same abandoned key over at once run the upstream once.
//!
//! The replica that dies is an `idemgate serve` process (fleet `Replica`); the one that
//! survives runs in-process, on the same Redis and Postgres.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use idemgate::App;
use idemgate_fleet::Replica;

use super::{extra, extra_in, stores, stores_in, Claims, INTERVAL, LOCK_TTL, TOKEN};
use crate::support::{
    comparable, config, eventually, keyed_post, metric, problem_code, read, serve_process,
    MockUpstream, PgServer, RedisServer, TestApp,
};

/// How long the upstream takes with each request.
const LATENCY: Duration = Duration::from_millis(1500);

/// The replica that dies: a process with the same configuration.
async fn doomed(
    dir: &Path,
    redis: &RedisServer,
    pg: &PgServer,
    up: &MockUpstream,
    completer: bool,
) -> Replica {
    doomed_in(Claims::WriteThrough, dir, redis, pg, up, completer).await
}

/// [`doomed`] with claims kept as `claims` says.
async fn doomed_in(
    claims: Claims,
    dir: &Path,
    redis: &RedisServer,
    pg: &PgServer,
    up: &MockUpstream,
    completer: bool,
) -> Replica {
    let toml = format!(
        "[replay_cache]\nmax_bytes = \"0B\"\n\
         [redis]\nurl = \"{}\"\ncommand_timeout = \"300ms\"\n\
         [idempotency]\nanonymous = \"shared\"\nreplay_set_cookie = true\n\
         [[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\nupstream = \"{}\"\n\
         upstream_timeout = \"10s\"\n{}",
        redis.url(),
        up.url(),
        // Its own completer never gets the chance: it dies first.
        extra_in(claims, pg, completer, Duration::from_secs(3600)),
    );
    serve_process(dir, "doomed", &toml).await
}

/// Sends one keyed request per key to `replica` (clients that will never retry),
/// waits until the upstream has them all, then SIGKILLs the replica.
async fn abandon(replica: &mut Replica, up: &MockUpstream, keys: &[String]) -> Instant {
    let before = up.executions();
    for key in keys {
        let url = format!("{}/v1/payments", replica.url());
        let request = keyed_post(&reqwest::Client::new(), url, key, body_of(key));
        // The client goes away with the replica and never comes back.
        tokio::spawn(async move { drop(request.send().await) });
    }
    let all = eventually(Duration::from_secs(10), async || {
        up.executions() == before + keys.len()
    })
    .await;
    assert!(
        all,
        "the upstream did not get the requests: {}",
        replica.log_text()
    );
    replica.kill();
    Instant::now()
}

/// The body every request here sends for `key` (the abandoned client's and its retries').
fn body_of(key: &str) -> String {
    format!("{{\"amount\":10,\"key\":\"{key}\"}}")
}

/// A client's retry of `key` on `app`: the abandoned request again, and its answer.
async fn retry(app: &TestApp, key: &str) -> (u16, reqwest::header::HeaderMap, bytes::Bytes) {
    read(app.post(key, &body_of(key)).send().await.unwrap()).await
}

/// The completer outcome counter's value. The recorder is the process's, shared by
/// the tests that run at once: a test reads at least what it caused.
async fn outcomes(app: &TestApp, outcome: &str) -> f64 {
    let series = format!("idemgate_completer_outcomes_total{{outcome=\"{outcome}\"}}");
    metric(&app.metrics().await, &series)
}

/// The admin API's view of `key`'s record in Postgres.
async fn admin_pg(app: &TestApp, key: &str) -> serde_json::Value {
    let url = format!("http://{}/admin/keys/payments/{key}", app.admin);
    let r = (app.client.get(url).bearer_auth(TOKEN).send())
        .await
        .unwrap();
    let v: serde_json::Value = r.json().await.unwrap();
    v["postgres"].clone()
}

/// The fencing token (0 when absent) of every request the upstream got for `key`, in
/// order, and whether the completer sent it.
fn sent_for(up: &MockUpstream, key: &str) -> Vec<(i64, bool)> {
    (up.seen().iter())
        .filter(|s| s.headers.get("idempotency-key").is_some_and(|k| k == key))
        .map(|s| {
            let fence = (s.headers.get("idempotency-fencing-token"))
                .and_then(|v| v.to_str().ok()?.parse().ok());
            let completer = s
                .headers
                .get("idempotency-completer")
                .is_some_and(|v| v == "1");
            (fence.unwrap_or(0), completer)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_abandoned_request_is_completed_once_and_replayed() {
    completed_once_and_replayed(Claims::WriteThrough).await;
}

/// Vouched claims write a completer route's claims through, with the request kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_abandoned_request_is_completed_once_and_replayed_with_vouched_claims() {
    completed_once_and_replayed(Claims::Vouched).await;
}

async fn completed_once_and_replayed(claims: Claims) {
    let (redis, pg, up) = stores_in(claims, LATENCY).await;
    let dir = tempfile::tempdir().unwrap();
    let mut dead = doomed_in(claims, dir.path(), &redis, &pg, &up, true).await;
    let extra = extra_in(claims, &pg, true, INTERVAL);
    let survivor = TestApp::spawn(config(&redis.url(), &up.url(), &extra)).await;
    let key = "abandoned-1".to_string();
    let killed = abandon(&mut dead, &up, std::slice::from_ref(&key)).await;

    // The lease runs out within LOCK_TTL of the kill (its last heartbeat was earlier);
    // then the next pass takes it over, and the upstream gets the request again.
    let bound = LOCK_TTL + INTERVAL + LATENCY;
    let again = eventually(bound + Duration::from_secs(2), async || {
        sent_for(&up, &key).len() == 2
    })
    .await;
    let took = killed.elapsed();
    assert!(
        again,
        "the completer did not send the request again within {bound:?}"
    );
    // Stored before any retry: wait for the completion to land (the upstream's latency).
    let row = "state = 'completed' AND completer = 'completed' AND request IS NULL";
    assert!(eventually(LATENCY * 3, async || pg.count(row).await == 1).await);
    let sent = sent_for(&up, &key);
    assert!(!sent[0].1, "the first one came from the client");
    assert!(sent[1].1, "the second is marked Idempotency-Completer: 1");
    assert!(sent[1].0 > sent[0].0, "fencing tokens {sent:?} do not grow");
    eprintln!("completer re-sent the abandoned request {took:?} after the kill (bound {bound:?})");

    // A later retry replays that response byte for byte: the upstream's answer to the
    // completer (its second execution), headers and all.
    let first = retry(&survivor, &key).await;
    let second = retry(&survivor, &key).await;
    assert_eq!(first.0, 201);
    assert_eq!(first.1["idempotent-replayed"], "true");
    assert_eq!(first.2, "{\"execution\":2,\"status\":201}");
    assert_eq!(first.1["x-execution"], "2");
    assert_eq!(first.1.get_all("set-cookie").iter().count(), 2);
    assert_eq!(
        (comparable(&first.1), &first.2),
        (comparable(&second.1), &second.2)
    );
    assert_eq!(sent_for(&up, &key).len(), 2, "nothing ran a third time");
    let shown = admin_pg(&survivor, &key).await;
    assert_eq!(shown["state"], "completed", "{shown}");
    assert_eq!(shown["completer"]["state"], "completed", "{shown}");
    assert_eq!(shown["completer"]["request_kept"], false, "{shown}");
    assert!(outcomes(&survivor, "completed").await >= 1.0);
    if claims == Claims::Vouched {
        let series = "idemgate_claim_vouch_total{verdict=\"completer\"}";
        let through = metric(&survivor.metrics().await, series);
        assert!(through >= 1.0, "the takeover was written through");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_completer_nothing_happens_until_a_retry() {
    let (redis, pg, up) = stores(LATENCY).await;
    let dir = tempfile::tempdir().unwrap();
    let mut dead = doomed(dir.path(), &redis, &pg, &up, false).await;
    let survivor = TestApp::spawn(config(
        &redis.url(),
        &up.url(),
        &extra(&pg, false, INTERVAL),
    ))
    .await;
    let key = "abandoned-off".to_string();
    abandon(&mut dead, &up, std::slice::from_ref(&key)).await;
    // The lease runs out; then, in real time, the time a pass (were the completer on)
    // would take to send it again.
    let lapsed = async || pg.count("lease_expires_at < now()").await == 1;
    assert!(
        eventually(LOCK_TTL * 3, lapsed).await,
        "the lease never ran out"
    );
    tokio::time::sleep(INTERVAL + LATENCY + Duration::from_secs(2)).await;
    assert_eq!(
        sent_for(&up, &key).len(),
        1,
        "something sent it again without a retry"
    );
    assert_eq!(
        pg.count("request IS NOT NULL").await,
        0,
        "nothing is kept with the completer off"
    );
    // The retry finds the lease lapsed with no completion: without the completer (whose
    // upstream deduplicates on the key) that is an unknown outcome, stored and replayed
    // (`on_ambiguous = "store"`), never run again.
    let again = retry(&survivor, &key).await;
    assert_eq!(
        (again.0, &again.1["idempotent-replayed"]),
        (502, &"false".parse().unwrap()),
        "{:?}",
        again.2
    );
    assert_eq!(problem_code(&again.1, &again.2), "upstream_outcome_unknown");
    assert_eq!(sent_for(&up, &key).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_racing_the_completer_runs_the_upstream_once() {
    let (redis, pg, up) = stores(LATENCY).await;
    let dir = tempfile::tempdir().unwrap();
    let mut dead = doomed(dir.path(), &redis, &pg, &up, true).await;
    // The client's replica; and the completer's, whose pass this test runs by hand
    // (its own loop waits an hour), at the same moment as the retries.
    let hour = Duration::from_secs(3600);
    let client_side =
        TestApp::spawn(config(&redis.url(), &up.url(), &extra(&pg, true, hour))).await;
    let completer = Arc::new(
        App::build(config(&redis.url(), &up.url(), &extra(&pg, true, hour)))
            .await
            .unwrap(),
    );
    let keys: Vec<String> = (0..6).map(|i| format!("race-{i}")).collect();
    abandon(&mut dead, &up, &keys).await;
    // Every lease has run out (the dead replica's last heartbeat is at most LOCK_TTL old).
    assert!(
        eventually(LOCK_TTL * 3, async || pg
            .count("lease_expires_at < now()")
            .await
            == 6)
        .await
    );

    let client = &client_side;
    let retries =
        futures_util::future::join_all(keys.iter().enumerate().map(|(i, key)| async move {
            // Real time: spread around the completer's start (2 ms), so that each side
            // wins some keys.
            tokio::time::sleep(Duration::from_micros(800 * i as u64)).await;
            let body = body_of(key);
            read(client.post(key, &body).send().await.unwrap()).await
        }));
    // The completer has reserved them all (its pass's first half) and takes them over
    // (the second half) while the clients retry: two claims of each key at once.
    let reserved = idemgate::testing::completer::reserve(&completer)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reserved.reserved.len(), 6);
    let attempts = async {
        tokio::time::sleep(Duration::from_millis(2)).await; // the race is paced in real time
        idemgate::testing::completer::attempt_all(&completer, reserved).await
    };
    let (answers, pass) = tokio::join!(retries, attempts);
    eprintln!("completer outcomes: {:?}", pass.outcomes);
    for (key, answer) in keys.iter().zip(&answers) {
        let sent = sent_for(&up, key);
        assert_eq!(
            sent.len(),
            2,
            "{key}: the upstream ran it {} times after the kill",
            sent.len() - 1
        );
        assert!(sent[1].0 > sent[0].0);
        // The client got the result (it ran it) or 409 (the completer ran it); either
        // way a later retry replays the one stored response.
        let later = read(client_side.post(key, &body_of(key)).send().await.unwrap()).await;
        assert_eq!(
            (later.0, &later.1["idempotent-replayed"]),
            (201, &"true".parse().unwrap()),
            "{key}"
        );
        match answer.0 {
            201 => {
                assert!(!sent[1].1, "{key}: the client ran it, not the completer");
                assert_eq!(
                    (comparable(&answer.1), &answer.2),
                    (comparable(&later.1), &later.2)
                );
            }
            409 => assert!(sent[1].1, "{key}: 409, so the completer ran it"),
            other => panic!("{key}: unexpected {other}: {answer:?}"),
        }
    }
    // Both ways out of the race happen over enough keys, but neither is required.
    let by_completer = keys.iter().filter(|k| sent_for(&up, k)[1].1).count();
    eprintln!(
        "{by_completer} of {} keys run by the completer, the rest by the retry",
        keys.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_the_upstream_refuses_or_never_answers_is_given_up_and_shown() {
    let (redis, pg, up) = stores(Duration::from_secs(3)).await;
    let dir = tempfile::tempdir().unwrap();
    let mut dead = doomed(dir.path(), &redis, &pg, &up, true).await;
    let mut cfg = config(&redis.url(), &up.url(), &extra(&pg, true, INTERVAL));
    // The completer has no client to answer: its calls end at the hard limit, and an
    // attempt that got no answer is handed back for the next one only where
    // `on_ambiguous = "release"` (the default stores the unknown outcome instead).
    cfg.routes[0].upstream_timeout = Duration::from_millis(700);
    cfg.routes[0].upstream_deadline = Duration::from_millis(700);
    cfg.idempotency.on_ambiguous = idemgate::config::OnAmbiguous::Release;
    cfg.postgres.as_mut().unwrap().completer_attempts = 3;
    let survivor = TestApp::spawn(cfg).await;
    let key = "never-answered".to_string();
    abandon(&mut dead, &up, std::slice::from_ref(&key)).await;

    // The first attempt is refused (503, a release status), the next two get no
    // answer (the survivor's calls time out): each hands its lease back for the next,
    // after a backoff; then the request is given up: counted, marked, the kept
    // request deleted.
    up.set_delay(Duration::ZERO);
    up.push_statuses(&[503]);
    let refused = eventually(Duration::from_secs(10), async || {
        outcomes(&survivor, "refused").await >= 1.0
    })
    .await;
    assert!(refused, "no refused attempt: {}", survivor.metrics().await);
    up.set_delay(Duration::from_secs(3));
    let gave_up = eventually(Duration::from_secs(15), async || {
        outcomes(&survivor, "given_up").await >= 1.0
    })
    .await;
    assert!(gave_up, "not given up: {}", survivor.metrics().await);
    assert!(outcomes(&survivor, "retry").await >= 2.0);
    let sent = sent_for(&up, &key);
    assert_eq!(sent.len(), 4, "the client's, then three attempts: {sent:?}");
    assert!(sent.windows(2).all(|w| w[1].0 > w[0].0), "{sent:?}");
    let shown = admin_pg(&survivor, &key).await;
    assert_eq!(shown["completer"]["state"], "given_up", "{shown}");
    assert_eq!(shown["completer"]["attempts"], 3, "{shown}");
    assert_eq!(shown["completer"]["request_kept"], false, "{shown}");
    // No more attempts (real time: four passes' worth); a client's retry still runs it
    // (the outcome is in doubt).
    tokio::time::sleep(INTERVAL * 4).await;
    assert_eq!(sent_for(&up, &key).len(), 4);
    up.set_delay(Duration::ZERO);
    let body = body_of(&key);
    let retry = read(survivor.post(&key, &body).send().await.unwrap()).await;
    assert_eq!(retry.0, 201, "{retry:?}");
    assert_eq!(
        admin_pg(&survivor, &key).await["completer"]["state"],
        serde_json::Value::Null
    );
}
