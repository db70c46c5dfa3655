-- idemgate schema 5 (additive: the release before it runs beside it): the moment a
-- completed record stops being replayed, the one its first answer and every replay
-- advertise (`Idempotency-Expires`): its completion plus the route's ttl, rounded up to
-- a whole second. `expires_at` (indexed, for the reaper) stays the claim's lease + ttl so
-- that a completion remains a HOT update; this column is not indexed.
-- A row's replay_until is only its own when it is later than its completed_at: a row
-- completed by the release before, which leaves the column alone, keeps expires_at's
-- meaning. Adding a nullable column rewrites nothing: instant on any table.
ALTER TABLE idemgate_records ADD COLUMN replay_until timestamptz;
