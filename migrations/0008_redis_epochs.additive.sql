-- idemgate schema 8 (additive: the release before it runs beside it, and never reads it):
-- the Redis key prefixes whose epoch markers a gateway has written, one per slot, when a
-- deployment first used claims that Redis vouches for (`postgres.claims = "vouched"`).
-- Once a prefix is here, a slot found without its marker lost its data (a flush, a
-- restart without its AOF): its claims wait until every lease it may have held was
-- written back. A prefix not here is new: its markers are written, then it is added.
CREATE TABLE IF NOT EXISTS idemgate_redis_epochs (
    key_prefix text PRIMARY KEY,
    markers_set_at timestamptz NOT NULL DEFAULT now()
);
