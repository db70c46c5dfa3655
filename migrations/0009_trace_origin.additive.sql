-- idemgate schema 9 (additive: the release before it runs beside it): the trace and span
-- id (16 + 8 bytes) of the execution that produced a completed record, where `[tracing]`
-- exported it, so that a replay read from Postgres links to that execution's span as one
-- read from Redis does (there the record's encoding carries them). Written by the
-- write-through statement, read by lookups; NULL for every other row, and the release
-- before neither writes nor reads it. Adding a nullable column rewrites nothing.
ALTER TABLE idemgate_records ADD COLUMN IF NOT EXISTS origin bytea;
