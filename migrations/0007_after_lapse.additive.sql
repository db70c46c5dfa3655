-- idemgate schema 7 (additive: the release before it runs beside it): whether the lease a
-- row holds was taken over from one that lapsed without a completion (its holder killed,
-- frozen past its lease, or cut off from the stores), so that the claim that took it can
-- tell: its outcome is unknown (`idempotency.on_ambiguous`). Written and read only by the
-- claim statement (`RETURNING`); the release before leaves it alone and never reads it.
-- Adding a nullable column rewrites nothing: instant on any table.
ALTER TABLE idemgate_records ADD COLUMN IF NOT EXISTS after_lapse boolean;
