-- idemgate schema 1: one row per idempotency record, keyed by (scope, key).
-- scope    = SHA-256 of (route, tenant header value); key_hash = SHA-256 of (scope, key),
--            the same record id the Redis keys use. Raw keys are never stored.
-- state    = 'leased' (a claim made in Postgres, or written through) | 'completed'.
-- headers  = the stored response's end-to-end headers, in idemgate's binary header encoding.
CREATE TABLE idemgate_records (
    scope            bytea       NOT NULL,
    key_hash         bytea       NOT NULL,
    route            text        NOT NULL,
    fingerprint      bytea       NOT NULL,
    state            text        NOT NULL CHECK (state IN ('leased', 'completed')),
    lock_token       text,
    lease_expires_at timestamptz,
    status           smallint,
    headers          bytea,
    body             bytea,
    created_at       timestamptz NOT NULL DEFAULT now(),
    completed_at     timestamptz,
    expires_at       timestamptz NOT NULL,
    PRIMARY KEY (scope, key_hash)
);

-- The reaper deletes by expiry, oldest first.
CREATE INDEX idemgate_records_expires_at ON idemgate_records (expires_at);
