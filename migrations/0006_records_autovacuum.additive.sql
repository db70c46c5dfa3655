-- idemgate schema 6 (additive: the release before it runs beside it): autovacuum comes
-- to the records table once 1% of its rows are dead instead of Postgres' default 20%.
-- The reaper deletes every record once its ttl is over, so the whole table turns over
-- once per ttl; with the default, a table of 10M records collects 2M dead rows before
-- each vacuum, and until it comes no new record reuses their space (`make soak` over
-- 10M rows: 1.3 kB more table per record written, 2.6 GB until the first vacuum). At
-- 1% it collects 100,000 (BENCHMARKS.md, Soak). A vacuum reads only the pages written
-- since the one before (the visibility map skips the rest).
-- A setting an administrator gave the table before this migration is kept.
-- Changing a storage parameter takes a lock that blocks no read or write: instant on
-- any table (a vacuum running on it yields within `deadlock_timeout`, unless it runs to
-- prevent transaction ID wraparound: then the migration waits for it).
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_class c, pg_options_to_table(c.reloptions) o
        WHERE c.oid = 'idemgate_records'::regclass
          AND o.option_name = 'autovacuum_vacuum_scale_factor'
    ) THEN
        ALTER TABLE idemgate_records SET (autovacuum_vacuum_scale_factor = 0.01);
    END IF;
END
$$;
