-- idemgate schema 4 (additive: the release before it runs beside it): the completion of
-- a write-through claim is a HOT update (no index entry written, the new row version on
-- the claim's page) when it changes no indexed column and the page has room for it.
-- * fillfactor 50: a claim row is about half the size of its completed record, so pages
--   of new claims keep room for their completions (rows written before stay as they are).
-- * The completer's index no longer names `state`, which every completion changes; its
--   pass (state = 'leased' AND request IS NOT NULL AND lease_expires_at < ...), this
--   release's and the previous one's, reads the new index instead. A completion keeps
--   lease_expires_at (read only while state = 'leased'); its `request = NULL` changes
--   nothing where no request was kept.
-- * The claim writes an expiry past the record's ttl (lease + ttl), which its completion
--   keeps (expires_at is indexed for the reaper).
-- On a big table the CREATE INDEX reads the whole table (3 s for 10M rows, measured)
-- while writes wait.
ALTER TABLE idemgate_records SET (fillfactor = 50);
CREATE INDEX idemgate_records_kept_requests ON idemgate_records (lease_expires_at)
    WHERE request IS NOT NULL;
DROP INDEX idemgate_records_kept;
