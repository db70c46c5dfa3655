//! Claims in Postgres share statements (`postgres.claims = "write_through"`
//! and the Redis fallback). Each claim of a round is decided as a claim alone would be:
//! one acquires per key, duplicates queued together see the winner's lease, expired
//! leases are taken over with a higher fence, completed records and live leases hold;
//! only the takeover of a lease that lapsed inside its record's life says `after_lapse`
//! (and says it again to the same claim sent twice).

use std::time::Duration;

use futures_util::future::join_all;
use futures_util::FutureExt;
use idemgate::idempotency::{Fingerprint, Release};
use idemgate::testing::store::postgres::claim_asks::ClaimAsk;
use idemgate::testing::store::postgres::claim_rounds::ClaimRounds;
use idemgate::testing::store::postgres::{CompletedRecord, Found, PgClaim};
use idemgate::testing::store::PgStore;

use crate::support::records::{fingerprint, id, rec, scope, store};
use crate::support::LEASE;
use crate::support::{eventually, until_rows, PgServer};

/// The lock token and fence Postgres holds for `key`.
async fn holder(pg: &PgServer, key: &str) -> (Option<String>, i64) {
    let row = (pg.client().await)
        .query_one(
            "SELECT lock_token, fence FROM idemgate_records WHERE key_hash = $1",
            &[&&id(key).as_bytes()[..]],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

/// Keys per kind in [`batched_claims_decide_each_claim_as_alone_and_acquire_each_key_once`].
const N: usize = 12;

/// A claim of the round: key, lock token, fingerprint.
type Ask = (String, String, Fingerprint);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_claims_decide_each_claim_as_alone_and_acquire_each_key_once() {
    let pg = PgServer::start();
    let s = store(&pg);
    s.migrate().await.unwrap();
    let fp = fingerprint("{}");
    let old_fences = fill_the_keys(&s, fp).await;
    until_rows(&pg, "lease_expires_at <= now()", 2 * N as i64).await;

    let claims = ClaimRounds::spawn(s.clone(), 256);
    let asks = the_asks(fp);
    let answers = join_all(asks.iter().map(|(key, token, fp)| {
        let claims = claims.clone();
        async move { claims.claim(rec(key), fp, token, LEASE).await }
    }))
    .await;

    let mut winners = std::collections::HashMap::new();
    for ((key, token, fp), answer) in asks.iter().zip(answers) {
        let answer = answer.unwrap_or_else(|e| panic!("{key}: {e}"));
        let kind = key.split('-').next().unwrap();
        match (kind, answer) {
            ("done", PgClaim::Held(Found::Completed { fingerprint, .. })) => {
                assert_eq!(fingerprint, *fp, "{key}");
            }
            ("held", PgClaim::Held(Found::Leased { remaining, .. })) => {
                assert!(remaining > Duration::from_secs(20), "{key}: {remaining:?}");
            }
            ("expired", PgClaim::Acquired { fence, after_lapse }) => {
                let i: usize = key[8..].parse().unwrap();
                assert!(fence > old_fences[i], "{key}: a takeover fences higher");
                assert_eq!(holder(&pg, key).await, (Some(token.clone()), fence));
                assert!(!after_lapse, "{key}: the whole record had expired");
            }
            ("lapsed", PgClaim::Acquired { fence, after_lapse }) => {
                assert!(after_lapse, "{key}: its lease lapsed with no completion");
                assert_eq!(holder(&pg, key).await, (Some(token.clone()), fence));
                // The same claim sent again (a dropped connection) hears the same.
                let again = claims.claim(rec(key), fp, token, LEASE).await.unwrap();
                assert!(
                    matches!(again, PgClaim::Acquired { after_lapse: true, fence: f } if f == fence),
                    "{key}: {again:?}"
                );
            }
            ("new", PgClaim::Acquired { fence, after_lapse }) => {
                assert!(!after_lapse, "{key}: a new key");
                let before = winners.insert(key.clone(), (token.clone(), *fp, fence));
                assert!(before.is_none(), "{key} acquired twice");
            }
            ("new", PgClaim::Held(Found::Leased { .. })) => {}
            (_, other) => panic!("{key}: {other:?}"),
        }
    }
    assert_eq!(winners.len(), N, "each new key acquired exactly once");
    // The losers saw the winner's lease: its fingerprint (a mismatch for them).
    for (key, (token, fp, fence)) in &winners {
        assert_eq!(
            holder(&pg, key).await,
            (Some(token.clone()), *fence),
            "{key}"
        );
        match s.lookup(rec(key)).await.unwrap() {
            Some(Found::Leased { fingerprint, .. }) => assert_eq!(fingerprint, *fp),
            other => panic!("{key}: {other:?}"),
        }
    }
    let statements = claims.statements();
    assert!(
        (3..asks.len() as u64 / 2).contains(&statements),
        "{} claims at once share statements (a key at most once per statement), ran {statements}",
        asks.len()
    );
}

/// What the keys hold before the claims: completed records (`done-i`), live leases
/// (`held-i`), leases that have run out (`expired-i`, whose fences it returns) and
/// leases that lapsed inside their record's life (`lapsed-i`).
async fn fill_the_keys(s: &PgStore, fp: Fingerprint) -> Vec<i64> {
    let done: Vec<CompletedRecord> = (0..N)
        .map(|i| CompletedRecord {
            scope: scope(),
            id: id(&format!("done-{i}")),
            route: "payments".into(),
            fingerprint: fp,
            token: "old".into(),
            status: 201,
            headers: bytes::Bytes::from_static(b"\x00\x00"),
            body: bytes::Bytes::from_static(b"{}"),
            expiry: idemgate::idempotency::Expiry::within(std::time::Duration::from_millis(60_000)),
            origin: None,
            claimed_in_postgres: true,
        })
        .collect();
    s.complete_batch(&done).await.unwrap();
    let mut old_fences = Vec::new();
    for i in 0..N {
        let live = s.claim(rec(&format!("held-{i}")), &fp, "holder", LEASE);
        assert!(matches!(live.await.unwrap(), PgClaim::Acquired { .. }));
        let short = Duration::from_millis(1);
        match s
            .claim(rec(&format!("expired-{i}")), &fp, "gone", short)
            .await
        {
            Ok(PgClaim::Acquired { fence, .. }) => old_fences.push(fence),
            other => panic!("{other:?}"),
        }
        // A lease of 1 ms in a record that lives a minute: it lapses, the row stays.
        let ask = ClaimAsk::new(rec(&format!("lapsed-{i}")), &fp, "died", short)
            .living(Duration::from_secs(60));
        let lapsing = s.claim_round(&[&ask]).await.pop().unwrap().unwrap();
        assert!(
            matches!(
                lapsing,
                Some(PgClaim::Acquired {
                    after_lapse: false,
                    ..
                })
            ),
            "{lapsing:?}"
        );
    }
    old_fences
}

/// The claims of the round: one of each prepared key, and three of each new key
/// (`new-i`), each with its own request.
fn the_asks(fp: Fingerprint) -> Vec<Ask> {
    let mut asks: Vec<Ask> = Vec::new();
    for i in 0..N {
        for kind in ["done", "held", "expired", "lapsed"] {
            asks.push((format!("{kind}-{i}"), format!("t-{kind}-{i}"), fp));
        }
        // Three claims of one new key, queued together, each with its own request.
        for n in 0..3 {
            let body = format!("{{\"n\":{n}}}");
            asks.push((
                format!("new-{i}"),
                format!("t-new-{i}-{n}"),
                fingerprint(&body),
            ));
        }
    }
    asks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batched_claim_whose_caller_went_away_leaves_no_lease() {
    let pg = PgServer::start();
    let s = store(&pg);
    s.migrate().await.unwrap();
    let claims = ClaimRounds::spawn(s.clone(), 256);
    let fp = fingerprint("{}");
    // Queued, then dropped before (or while) the batch runs.
    for i in 0..40 {
        let key = format!("gone-{i}");
        let claim = claims.claim(rec(&key), &fp, "caller-gone", LEASE);
        assert!(claim.now_or_never().is_none());
    }
    // A claim after them is answered: the batch ran past the abandoned ones.
    let after = claims.claim(rec("after"), &fp, "t", LEASE).await.unwrap();
    assert!(matches!(after, PgClaim::Acquired { .. }));
    let clean = eventually(Duration::from_secs(5), async || {
        pg.count("lock_token = 'caller-gone'").await == 0
    })
    .await;
    assert!(clean, "an abandoned claim holds nothing");
    for i in 0..40 {
        let again = claims.claim(rec(&format!("gone-{i}")), &fp, "t2", LEASE);
        assert!(matches!(again.await.unwrap(), PgClaim::Acquired { .. }));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_a_lease_that_followed_a_lapse_ends_it_and_keeps_the_lapse() {
    let pg = PgServer::start();
    let s = store(&pg);
    s.migrate().await.unwrap();
    let fp = fingerprint("{}");
    let short = Duration::from_millis(1);
    let died = ClaimAsk::new(rec("lapsed"), &fp, "died", short).living(Duration::from_secs(60));
    s.claim_round(&[&died]).await.pop().unwrap().unwrap();
    let fresh = ClaimAsk::new(rec("fresh"), &fp, "t1", LEASE).living(Duration::from_secs(60));
    s.claim_round(&[&fresh]).await.pop().unwrap().unwrap();
    until_rows(&pg, "lease_expires_at <= now()", 1).await;
    let taken = s.claim(rec("lapsed"), &fp, "t1", LEASE).await.unwrap();
    assert!(
        matches!(
            taken,
            PgClaim::Acquired {
                after_lapse: true,
                ..
            }
        ),
        "{taken:?}"
    );

    // Released (say its caller went away): ended, the row kept.
    for key in ["lapsed", "fresh"] {
        let released = s.release(rec(key), "t1").await.unwrap();
        assert_eq!(released, Release::Released, "{key}");
        assert_eq!(s.release(rec(key), "t1").await.unwrap(), Release::NotHeld);
    }
    assert_eq!(
        pg.count("state = 'leased'").await,
        1,
        "only the lapsed key keeps a row"
    );
    let next = s.claim(rec("lapsed"), &fp, "t2", LEASE).await.unwrap();
    assert!(
        matches!(
            next,
            PgClaim::Acquired {
                after_lapse: true,
                ..
            }
        ),
        "the next claim must learn of the lapse too: {next:?}"
    );
    let other = s.claim(rec("fresh"), &fp, "t2", LEASE).await.unwrap();
    assert!(
        matches!(
            other,
            PgClaim::Acquired {
                after_lapse: false,
                ..
            }
        ),
        "{other:?}"
    );
}
