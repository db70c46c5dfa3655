INSERT INTO idemgate_records AS r
(scope, key_hash, route, fingerprint, state, lock_token, status,
headers, body, created_at, completed_at, expires_at,
replay_until, origin)
SELECT s, k, rt, f, 'completed', t, st, h, b, now(), now(),
now() + interval '1 millisecond' * ms,
now() + interval '1 millisecond' * ms, o
FROM (SELECT unnest($1::bytea[]) AS s, unnest($2::bytea[]) AS k,
unnest($3::text[]) AS rt, unnest($4::bytea[]) AS f,
unnest($5::text[]) AS t, unnest($6::int2[]) AS st,
unnest($7::bytea[]) AS h, unnest($8::bytea[]) AS b,
unnest($9::int8[]) AS ms, unnest($10::bytea[]) AS o) AS u
