-- EXPLAIN (ANALYZE, BUFFERS, WAL) of the hot statements on the seeded table (deploy/bench/pg-levers.sh),
-- for a round of 6 keys, rolled back: the claim (leases.rs CLAIM), the write-through
-- (completions.rs WRITE_THROUGH) and the lookup (lookups.rs LOOKUP), literal arrays for
-- the parameters. Variables: km (the claim's least lifetime in ms: 0 before schema 4,
-- lease + ttl after) and wt_set (the write-through's SET list before `completer = ...`).
\pset pager off
BEGIN;
CREATE TEMP TABLE ks AS SELECT array_agg(sha256(('ps' || g)::bytea)) s, array_agg(sha256(('pk' || g || random())::bytea)) k,
  array_agg('payments'::text) rt, array_agg(sha256(('pf' || g)::bytea)) f, array_agg(md5(g::text || random())) t
  FROM generate_series(1, 6) g;
\echo '--- claim (6 new keys)'
EXPLAIN (ANALYZE, BUFFERS, WAL, COSTS OFF)
INSERT INTO idemgate_records AS r
       (scope, key_hash, route, fingerprint, state, lock_token,
        lease_expires_at, created_at, expires_at, fence, request, completer)
     SELECT s, k, rt, f, 'leased', t,
            now() + interval '1 millisecond' * ms, now(),
            now() + interval '1 millisecond' * greatest(ms, km),
            (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, rq, c
     FROM UNNEST((SELECT s FROM ks), (SELECT k FROM ks), (SELECT rt FROM ks), (SELECT f FROM ks), (SELECT t FROM ks),
                 array_fill(30000::float8, ARRAY[6]), array_fill(NULL::bytea, ARRAY[6]),
                 array_fill(:km::float8, ARRAY[6]), array_fill(NULL::text, ARRAY[6]))
          AS u(s, k, rt, f, t, ms, rq, km, c)
     ON CONFLICT (scope, key_hash) DO UPDATE SET
       fence = CASE WHEN r.lock_token = EXCLUDED.lock_token THEN r.fence
                    ELSE greatest(r.fence + 1, EXCLUDED.fence) END,
       route = EXCLUDED.route, fingerprint = EXCLUDED.fingerprint,
       state = 'leased', lock_token = EXCLUDED.lock_token,
       lease_expires_at = EXCLUDED.lease_expires_at, status = NULL,
       headers = NULL, body = NULL, created_at = now(),
       completed_at = NULL, expires_at = EXCLUDED.expires_at,
       request = EXCLUDED.request, completer = EXCLUDED.completer,
       completer_attempts = CASE WHEN EXCLUDED.completer IS NULL THEN NULL
                                 ELSE r.completer_attempts END
     WHERE r.expires_at <= now()
        OR (r.state = 'leased' AND (r.lease_expires_at <= now()
            OR r.lock_token = EXCLUDED.lock_token))
     RETURNING r.lock_token, r.fence;
\echo '--- write-through (completing the 6 claims)'
EXPLAIN (ANALYZE, BUFFERS, WAL, COSTS OFF)
INSERT INTO idemgate_records AS r
       (scope, key_hash, route, fingerprint, state, lock_token, status,
        headers, body, created_at, completed_at, expires_at)
     SELECT s, k, rt, f, 'completed', t, st, h, b, now(), now(),
            now() + interval '1 millisecond' * ttl
     FROM UNNEST((SELECT s FROM ks), (SELECT k FROM ks), (SELECT rt FROM ks), (SELECT f FROM ks), (SELECT t FROM ks),
                 array_fill(201::int2, ARRAY[6]), array_fill(decode(repeat('00', 40), 'hex'), ARRAY[6]),
                 array_fill(convert_to(repeat('x', 150), 'UTF8'), ARRAY[6]), array_fill(86400000::int8, ARRAY[6]))
          AS u(s, k, rt, f, t, st, h, b, ttl)
     ON CONFLICT (scope, key_hash) DO UPDATE SET
       state = 'completed', lock_token = EXCLUDED.lock_token,
       fingerprint = EXCLUDED.fingerprint, status = EXCLUDED.status,
       headers = EXCLUDED.headers, body = EXCLUDED.body,
       :wt_set
       completer = CASE WHEN r.state = 'leased' AND r.completer = 'running'
             AND r.lock_token = EXCLUDED.lock_token THEN 'completed' END
     WHERE r.expires_at <= now()
        OR (r.state = 'leased' AND (r.lock_token = EXCLUDED.lock_token
            OR r.lease_expires_at <= now()))
     RETURNING key_hash;
\echo '--- lookup (6 keys: the 6 just written)'
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
SELECT r.fingerprint, r.state, r.status, r.headers, r.body,
        (EXTRACT(EPOCH FROM (r.expires_at - now())) * 1000)::bigint,
        (EXTRACT(EPOCH FROM (r.lease_expires_at - now())) * 1000)::bigint,
        u.i
     FROM UNNEST((SELECT s FROM ks), (SELECT k FROM ks)) WITH ORDINALITY AS u(scope, key_hash, i)
     CROSS JOIN LATERAL (
        SELECT * FROM idemgate_records r
        WHERE r.scope = u.scope AND r.key_hash = u.key_hash AND r.expires_at > now()
        LIMIT 1) r;
\echo '--- lookup (6 seeded keys, cold)'
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
SELECT r.fingerprint, r.state, u.i
     FROM UNNEST(ARRAY(SELECT sha256(('s' || g * 1234567)::bytea) FROM generate_series(1, 6) g),
                 ARRAY(SELECT sha256(('k' || g * 1234567)::bytea) FROM generate_series(1, 6) g))
          WITH ORDINALITY AS u(scope, key_hash, i)
     CROSS JOIN LATERAL (
        SELECT * FROM idemgate_records r
        WHERE r.scope = u.scope AND r.key_hash = u.key_hash AND r.expires_at > now()
        LIMIT 1) r;
ROLLBACK;
