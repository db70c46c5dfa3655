//! Claims of unknown outcome, released in the background. A claim whose outcome is
//! unknown (no answer within the client's timeout, or the connection lost after it was
//! sent) may have committed, while its caller was told it
//! failed: nobody would ever release that lease, and the key would answer 409 until it
//! expired. Such a claim's tokens are released in the background, as the Redis path does;
//! a release is compare-and-delete on the token, so it is harmless if the claim never
//! landed. It goes first on the claim's own session, where Postgres runs it only after
//! the claim ended, committed or not; if that session is lost, from another one once
//! the server's statement timeout has ended the claim, until the lease would have
//! expired anyway.

use std::time::Duration;

use deadpool_postgres::Object;
use tokio::time::Instant;
use tokio_postgres::types::Type;

use super::PgStore;
use crate::idempotency::RecordId;

/// The release of leases by their tokens, many at once (`leases` releases one with it):
/// each deleted, or, where it was taken over after one that lapsed (`after_lapse`), ended
/// and its row kept, so that the next claim learns of that lapse too (the key's outcome
/// stays unknown, whoever releases); returns the keys released.
pub(super) const RELEASE_MANY: &str = "WITH u AS (
       SELECT * FROM UNNEST($1::bytea[], $2::bytea[], $3::text[]) AS u(s, k, t)),
     gone AS (
       DELETE FROM idemgate_records r USING u
       WHERE r.scope = u.s AND r.key_hash = u.k AND r.state = 'leased'
         AND r.lock_token = u.t AND r.after_lapse IS NOT TRUE
       RETURNING r.key_hash),
     ended AS (
       UPDATE idemgate_records r SET lease_expires_at = now()
       FROM u
       WHERE r.scope = u.s AND r.key_hash = u.k AND r.state = 'leased'
         AND r.lock_token = u.t AND r.after_lapse AND r.lease_expires_at > now()
       RETURNING r.key_hash)
     SELECT key_hash FROM gone UNION ALL SELECT key_hash FROM ended";

impl PgStore {
    /// Releases the claims of `tokens`, whose outcome is unknown, in the background: on
    /// `client` (the claim's session) first, then on others (see the module docs).
    pub(super) fn release_unknown(&self, client: Object, tokens: Tokens) {
        let store = self.clone();
        let lease = tokens.lease;
        tokio::spawn(async move {
            let until = Instant::now() + lease;
            let ids: Vec<&[u8]> = tokens.ids.iter().map(|id| &id.as_bytes()[..]).collect();
            // Unprepared, so that it goes out at once even while the session's answers
            // are late: one round trip, no statement to prepare first.
            let same_session = tokio::time::timeout(
                store.client_timeout * 2,
                client.query_typed(
                    RELEASE_MANY,
                    &[
                        (&tokens.scopes, Type::BYTEA_ARRAY),
                        (&ids, Type::BYTEA_ARRAY),
                        (&tokens.tokens, Type::TEXT_ARRAY),
                    ],
                ),
            )
            .await;
            if let Ok(Ok(rows)) = same_session {
                return tokens.released(&rows);
            }
            // A session that does not answer leaves the pool (closing it ends its backend).
            drop(Object::take(client));
            while Instant::now() + store.timeout < until {
                tokio::time::sleep(store.timeout).await;
                let (scopes, ids, held) = (&tokens.scopes, &ids, &tokens.tokens);
                let released = store
                    .timed("release", |client| async move {
                        let stmt = client.prepare_cached(RELEASE_MANY).await?;
                        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                            [scopes, ids, held];
                        Ok(client.query(&stmt, &params).await?)
                    })
                    .await;
                if let Ok(rows) = released {
                    return tokens.released(&rows);
                }
            }
            for id in &tokens.ids {
                tracing::warn!(key_hash = %id.short(), "could not release a postgres claim \
                    whose outcome is unknown; it ends when its lease expires");
            }
        });
    }
}

/// The tokens of claims whose outcome is unknown.
pub(super) struct Tokens {
    pub(super) scopes: Vec<Vec<u8>>,
    pub(super) ids: Vec<RecordId>,
    pub(super) tokens: Vec<String>,
    /// The longest lease asked: no release is needed after it.
    pub(super) lease: Duration,
}

impl Tokens {
    /// Logs the claims a release found (`rows`: their keys): they had committed.
    fn released(&self, rows: &[tokio_postgres::Row]) {
        for row in rows {
            let key: &[u8] = row.get(0);
            if let Some(id) = self.ids.iter().find(|id| id.as_bytes()[..] == *key) {
                tracing::info!(key_hash = %id.short(), "released a postgres claim whose \
                    answer was lost: it had committed after its caller gave up on it");
            }
        }
    }
}
