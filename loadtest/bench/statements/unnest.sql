INSERT INTO idemgate_records AS r
(scope, key_hash, route, fingerprint, state, lock_token, status,
headers, body, created_at, completed_at, expires_at,
replay_until, origin)
SELECT s, k, rt, f, 'completed', t, st, h, b, now(), now(),
now() + interval '1 millisecond' * ms,
now() + interval '1 millisecond' * ms, o
FROM UNNEST($1::bytea[], $2::bytea[], $3::text[], $4::bytea[],
$5::text[], $6::int2[], $7::bytea[], $8::bytea[],
$9::int8[], $10::bytea[])
AS u(s, k, rt, f, t, st, h, b, ms, o)
