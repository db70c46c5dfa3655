-- idemgate schema 2: the fencing token of the current or last lease taken in Postgres.
ALTER TABLE idemgate_records ADD COLUMN fence bigint NOT NULL DEFAULT 0;
