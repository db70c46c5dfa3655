//! The gateway's sessions plan each statement once: the batched statements take arrays
//! whose length Postgres reads when it plans for the values, so under its default
//! (`plan_cache_mode = auto`) it kept planning every round anew. A URL that sets
//! `plan_cache_mode` in its `options` keeps its own.

use idemgate::testing::store::postgres::CompletedRecord;

use crate::support::records::{completed, migrated_store, rec};
use crate::support::PgServer;

/// Rounds of the write-through and of the lookup, each of a different size.
const ROUNDS: usize = 8;

/// A store of one session on `url`, migrated, after [`ROUNDS`] write-through rounds of
/// 1 to 8 records and as many lookups; then `(generic, custom)` plans of the
/// write-through's statement and of the lookup's, on that session.
async fn plans_after_rounds(url: String, tag: &str) -> [(i64, i64); 2] {
    let s = migrated_store(url, 1).await;
    for round in 0..ROUNDS {
        let done: Vec<CompletedRecord> = (0..=round)
            .map(|i| CompletedRecord {
                token: format!("t-{round}-{i}"),
                claimed_in_postgres: true,
                ..completed(&format!("{tag}-{round}-{i}"), 3_600_000)
            })
            .collect();
        assert_eq!(
            s.complete_batch(&done).await.unwrap(),
            vec![true; round + 1]
        );
        let found = s.lookup(rec(&format!("{tag}-{round}-0"))).await.unwrap();
        assert!(found.is_some(), "{tag}: round {round} was stored");
    }
    let plans = s.prepared_plans().await.unwrap();
    let of = |prefix: &str| {
        let found = plans.iter().find(|(sql, ..)| sql.starts_with(prefix));
        let (_, generic, custom) = found.unwrap_or_else(|| panic!("{prefix}: {plans:#?}"));
        (*generic, *custom)
    };
    [
        of("INSERT INTO idemgate_records"),
        of("SELECT r.fingerprint"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_round_runs_on_the_plan_made_once_unless_the_url_says_otherwise() {
    let pg = PgServer::start();
    let rounds = ROUNDS as i64;
    let [write, lookup] = plans_after_rounds(pg.url(), "generic").await;
    assert_eq!(write, (rounds, 0), "the write-through: (generic, custom)");
    assert_eq!(lookup, (rounds, 0), "the lookup: (generic, custom)");

    let url = format!(
        "{}?options=-c%20plan_cache_mode%3Dforce_custom_plan",
        pg.url()
    );
    let [write, lookup] = plans_after_rounds(url, "custom").await;
    assert_eq!(write, (0, rounds), "the URL's own plan_cache_mode wins");
    assert_eq!(lookup, (0, rounds), "the URL's own plan_cache_mode wins");
}
