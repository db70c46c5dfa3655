-- idemgate schema 3 (additive: the release before it runs beside it): the completer.
-- request            = the request as forwarded (method, path and query, end-to-end
--                      headers, body), kept with a write-through lease on a route with
--                      `completer = true`, sealed like `body` under [encryption];
--                      NULL once the record completes, is released or given up.
-- completer          = NULL | 'running' (the completer took the lease over) |
--                      'completed' (completed by the completer) | 'given_up'.
-- completer_attempts = takeovers the completer reserved for the current kept request.
-- completer_next_at  = not before this time is the request tried again.
ALTER TABLE idemgate_records ADD COLUMN request bytea;
ALTER TABLE idemgate_records ADD COLUMN completer text;
ALTER TABLE idemgate_records ADD COLUMN completer_attempts integer;
ALTER TABLE idemgate_records ADD COLUMN completer_next_at timestamptz;

-- The completer's pass: leases with a kept request, oldest expiry first.
CREATE INDEX idemgate_records_kept ON idemgate_records (lease_expires_at)
    WHERE request IS NOT NULL AND state = 'leased';
