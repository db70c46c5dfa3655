//! Leases held in Postgres: the claim, the holder's heartbeat and the release.
//!
//! Claims are made in batches: one statement claims every key of a round
//! ([`PgStore::claim_round`]; [`claim_rounds`](super::claim_rounds) gathers the rounds of concurrent
//! requests), and each row is decided exactly as a claim of its own would be, since the
//! statement's `ON CONFLICT` condition is evaluated row by row. A round never holds one
//! key twice (a statement cannot touch a row twice); its rows are taken in key order, so
//! that two rounds in flight at once lock shared keys in the same order.
//!
//! A claim whose outcome is unknown (no answer, or a connection lost after it was sent)
//! is released in the background (`unknown`).

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use super::batcher::shared;
use super::claim_asks::{ClaimAsk, ClaimColumns};
use super::unknown::{Tokens, RELEASE_MANY};
use super::writer::refused;
use super::{timed_out, PgClaim, PgStore, RecordRef};
use crate::idempotency::{Fingerprint, RecordId, Release, Scope};
use crate::metrics;
use crate::store::StoreError;

/// What a claim statement came back with: rows, Postgres' error, or nothing in time.
type ClaimAnswer =
    Result<Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>, tokio::time::error::Elapsed>;

/// Inserts leased rows, or takes over expired ones (or ones leased by the same token):
/// one row per element of the arrays. Returns the token, new fence and `after_lapse` of
/// each row taken (true where the lease taken over had lapsed without a completion: an
/// unexpired row, leased by another token; a re-sent claim keeps what its first
/// sending found); a key that is held returns nothing. A row keeps the claim's resendable request
/// (`request`, NULL without one) and lives at least `km` ms (at least the lease and
/// then the record's `ttl`: its completion, a HOT update, keeps that expiry); `completer` is
/// `'running'` for the completer's takeover (which keeps counting its attempts) and
/// NULL for a client's (which starts the count again). The arrays are unnested in a
/// select list, as the write-through's are (`completions`, where the reason is).
pub(super) const CLAIM: &str = "INSERT INTO idemgate_records AS r
       (scope, key_hash, route, fingerprint, state, lock_token,
        lease_expires_at, created_at, expires_at, fence, request, completer)
     SELECT s, k, rt, f, 'leased', t,
            now() + interval '1 millisecond' * ms, now(),
            now() + interval '1 millisecond' * greatest(ms, km),
            (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, rq, c
     FROM (SELECT unnest($1::bytea[]) AS s, unnest($2::bytea[]) AS k,
                  unnest($3::text[]) AS rt, unnest($4::bytea[]) AS f,
                  unnest($5::text[]) AS t, unnest($6::float8[]) AS ms,
                  unnest($7::bytea[]) AS rq, unnest($8::float8[]) AS km,
                  unnest($9::text[]) AS c) AS u
     ON CONFLICT (scope, key_hash) DO UPDATE SET
       fence = CASE WHEN r.lock_token = EXCLUDED.lock_token THEN r.fence
                    ELSE greatest(r.fence + 1, EXCLUDED.fence) END,
       route = EXCLUDED.route, fingerprint = EXCLUDED.fingerprint,
       state = 'leased', lock_token = EXCLUDED.lock_token,
       lease_expires_at = EXCLUDED.lease_expires_at, status = NULL,
       headers = NULL, body = NULL, created_at = now(),
       completed_at = NULL, expires_at = EXCLUDED.expires_at, replay_until = NULL,
       request = EXCLUDED.request, completer = EXCLUDED.completer,
       completer_attempts = CASE WHEN EXCLUDED.completer IS NULL THEN NULL
                                 ELSE r.completer_attempts END,
       after_lapse = CASE WHEN r.lock_token = EXCLUDED.lock_token THEN r.after_lapse
                          ELSE r.state = 'leased' AND r.expires_at > now() END
     WHERE r.expires_at <= now()
        OR (r.state = 'completed' AND r.replay_until > r.completed_at
            AND r.replay_until <= now())
        OR (r.state = 'leased' AND (r.lease_expires_at <= now()
            OR r.lock_token = EXCLUDED.lock_token))
     RETURNING r.lock_token, r.fence, coalesce(r.after_lapse, false)";

/// What a claim statement took for one key: its new fencing token, and whether the
/// lease it took over had lapsed without a completion.
#[derive(Debug, Clone, Copy)]
struct Taken {
    fence: i64,
    after_lapse: bool,
}

/// How one claim of a round ended: acquired or held (`Some`), or `None` when the key
/// was held but its holder was gone by the time it was read (reaped): to try again.
pub type RoundOutcome = Result<Option<PgClaim>, StoreError>;

/// Most rounds one claim takes before it gives up with [`StoreError::ClaimRaced`].
pub const CLAIM_TRIES: u8 = 3;

impl PgStore {
    /// Claims `rec` in Postgres with `token` for `lease`: inserts a leased row, or takes
    /// over an expired one (or one leased by this same token). Acquired carries the
    /// fencing token (at least the database clock in microseconds, and above the
    /// previous one); otherwise what holds the key. On an error, the token holds nothing
    /// (or will not for long: see the module docs). Alone; requests share statements
    /// through [`ClaimRounds`](super::claim_rounds::ClaimRounds).
    pub async fn claim(
        &self,
        rec: RecordRef<'_>,
        fingerprint: &Fingerprint,
        token: &str,
        lease: Duration,
    ) -> Result<PgClaim, StoreError> {
        let ask = ClaimAsk::new(rec, fingerprint, token, lease);
        for _ in 0..CLAIM_TRIES {
            let outcome = self.claim_round(&[&ask]).await.pop();
            if let Some(claimed) = outcome.unwrap_or(Ok(None))? {
                return Ok(claimed);
            }
        }
        Err(StoreError::ClaimRaced)
    }

    /// One round of claims, each of a different key: one statement claims them all,
    /// then one lookup reads what holds the keys that were not acquired. The outcome
    /// of each ask, in order. A statement Postgres refuses for what it carries is
    /// retried one claim at a time, so that one claim it will never take fails alone.
    pub async fn claim_round(&self, asks: &[&ClaimAsk]) -> Vec<RoundOutcome> {
        let fences: Vec<Result<Option<Taken>, StoreError>> = match self.claim_statement(asks).await
        {
            Ok(fences) => fences.into_iter().map(Ok).collect(),
            Err(e) if asks.len() > 1 && refused(&e) => {
                let mut each = Vec::with_capacity(asks.len());
                for ask in asks {
                    let one = self.claim_statement(&[ask]).await;
                    each.push(one.map(|fences| fences.into_iter().next().flatten()));
                }
                each
            }
            Err(e) => shared(e, asks.len()).into_iter().map(Err).collect(),
        };
        let held: Vec<usize> = (fences.iter().enumerate())
            .filter(|(_, fence)| matches!(fence, Ok(None)))
            .map(|(i, _)| i)
            .collect();
        let mut found = Vec::new();
        if !held.is_empty() {
            let keys: Vec<(Scope, RecordId)> =
                held.iter().map(|&i| (asks[i].scope, asks[i].id)).collect();
            found = match self.lookup_many(&keys).await {
                Ok(found) => found,
                Err(e) => shared(e, held.len()).into_iter().map(Err).collect(),
            };
        }
        let mut found = found.into_iter();
        (fences.into_iter())
            .map(|fence| match fence {
                Ok(Some(Taken { fence, after_lapse })) => {
                    Ok(Some(PgClaim::Acquired { fence, after_lapse }))
                }
                Ok(None) => match found.next() {
                    Some(Ok(holder)) => Ok(holder.map(PgClaim::Held)),
                    Some(Err(e)) => Err(e),
                    None => Ok(None),
                },
                Err(e) => Err(e),
            })
            .collect()
    }

    /// One claim statement for `asks` (distinct keys): what each took, or `None` where
    /// the key is held.
    async fn claim_statement(&self, asks: &[&ClaimAsk]) -> Result<Vec<Option<Taken>>, StoreError> {
        let mut sorted: Vec<&ClaimAsk> = asks.to_vec();
        sorted.sort_unstable_by(|a, b| {
            (a.scope.as_bytes(), a.id.as_bytes()).cmp(&(b.scope.as_bytes(), b.id.as_bytes()))
        });
        let columns = ClaimColumns::of(&sorted);
        let started = Instant::now();
        let deadline = started + self.client_timeout;
        let client = self.checkout(deadline).await?; // on failure, nothing was sent
        let answer = tokio::time::timeout_at(deadline, async {
            let stmt = client.prepare_cached(CLAIM).await?;
            client.query(&stmt, &columns.params()).await
        })
        .await;
        metrics::postgres_op("claim", started.into_std());
        let result = self.claim_answer(asks, client, answer);
        self.servers.outcome(&result);
        result
    }

    /// What the claim statement's `answer` means for each of `asks`.
    fn claim_answer(
        &self,
        asks: &[&ClaimAsk],
        client: deadpool_postgres::Object,
        answer: ClaimAnswer,
    ) -> Result<Vec<Option<Taken>>, StoreError> {
        match answer {
            Ok(Ok(rows)) => {
                let fences: HashMap<&str, Taken> = (rows.iter())
                    .map(|r| {
                        let taken = Taken {
                            fence: r.get(1),
                            after_lapse: r.get(2),
                        };
                        (r.get(0), taken)
                    })
                    .collect();
                Ok(asks
                    .iter()
                    .map(|a| fences.get(a.token.as_str()).copied())
                    .collect())
            }
            // Postgres answered with an error: the statement did not commit.
            Ok(Err(e)) if e.as_db_error().is_some() => Err(timed_out(e.into())),
            Ok(Err(e)) => {
                self.release_unknown(client, unknown_tokens(asks));
                Err(e.into())
            }
            Err(_) => {
                self.no_answer(deadpool_postgres::Object::metrics(&client).created);
                self.release_unknown(client, unknown_tokens(asks));
                Err(StoreError::PgTimeout)
            }
        }
    }

    /// Pushes out `rec`'s lease if `token` still holds it (the holder's heartbeat).
    pub async fn extend(
        &self,
        rec: RecordRef<'_>,
        token: &str,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let lease_ms = lease.as_millis() as f64;
        self.timed("extend", |client| async move {
            let stmt = client
                .prepare_cached(
                    "UPDATE idemgate_records
                     SET lease_expires_at = now() + interval '1 millisecond' * $4::float8,
                         expires_at = greatest(expires_at, now() + interval '1 millisecond' * $4::float8)
                     WHERE scope = $1 AND key_hash = $2 AND state = 'leased' AND lock_token = $3",
                )
                .await?;
            let n = client
                .execute(&stmt, &[&&rec.scope.as_bytes()[..], &&rec.id.as_bytes()[..], &token, &lease_ms])
                .await?;
            Ok(n == 1)
        })
        .await
    }

    /// Releases `rec`'s lease if `token` holds it ([`RELEASE_MANY`], for one).
    pub async fn release(&self, rec: RecordRef<'_>, token: &str) -> Result<Release, StoreError> {
        self.timed("release", |client| async move {
            release_on(&client, &rec.scope, &rec.id, token).await
        })
        .await
    }
}

/// Releases the lease of `(scope, id)` if `token` holds it, on `client`.
async fn release_on(
    client: &deadpool_postgres::ClientWrapper,
    scope: &Scope,
    id: &RecordId,
    token: &str,
) -> Result<Release, StoreError> {
    let stmt = client.prepare_cached(RELEASE_MANY).await?;
    let (scopes, ids, tokens) = ([&scope.as_bytes()[..]], [&id.as_bytes()[..]], [token]);
    let released = client
        .query(&stmt, &[&&scopes[..], &&ids[..], &&tokens[..]])
        .await?;
    Ok(if released.len() == 1 {
        Release::Released
    } else {
        Release::NotHeld
    })
}

/// The tokens of the claims `asks`, whose outcome is unknown.
fn unknown_tokens(asks: &[&ClaimAsk]) -> Tokens {
    Tokens {
        scopes: asks.iter().map(|a| a.scope.as_bytes().to_vec()).collect(),
        ids: asks.iter().map(|a| a.id).collect(),
        tokens: asks.iter().map(|a| a.token.clone()).collect(),
        lease: asks.iter().map(|a| a.lease).max().unwrap_or_default(),
    }
}
