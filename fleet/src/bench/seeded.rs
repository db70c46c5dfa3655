//! `bench seed-postgres RECORDS`: the bench's Postgres (and, from `soak start`, the
//! soak's) in the state production runs in, a records table that already holds RECORDS
//! completed records (10 million in `make bench` and `make soak`), with
//! `pg_stat_statements` loaded so the driver can say what each statement costs.
//!
//! Seeding 10 M rows takes minutes, so the seeded cluster is kept as a template in
//! [`TEMPLATES`] (`pg-seeded-<records>-<schema>`, where `<schema>` is a hash of
//! `migrations/`; `bench down` removes the bench's cluster, not its templates) and copied
//! over the fresh cluster on the next run; a template older
//! than [`TEMPLATE_DAYS`] days is rebuilt, so its records (expiring [`EXPIRY_DAYS`] to
//! `EXPIRY_DAYS + 1` days after seeding) never expire during a run, and the reaper only
//! meets the rows the run itself lets expire.
//!
//! The seeded rows look like the gateway's: the scope of route `payments` for one of
//! 91 tenants (the bench's own tenant holds one record in ten), a 32-byte record id, fingerprint, a ~150-byte body and ~60 bytes of headers, `completed`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use super::{Bench, GatewayOptions, Ports, Res};
use crate::local::pg::{Cluster, PG_BIN};

/// Where seeded templates are kept (the `postgres` account reaches /var/tmp, which a
/// checkout under a private home is not); a few GiB each.
const TEMPLATES: &str = "/var/tmp/idemgate-bench-seeded";
/// A template older than this is rebuilt (its records expire later than this).
const TEMPLATE_DAYS: u64 = 3;
/// Seeded records expire this many days (plus up to one) after seeding.
const EXPIRY_DAYS: u64 = 4;
/// Changes with what the seeded rows hold or how they are laid out (a new template then).
const SEED_VERSION: u32 = 3;
/// The tenant (`Authorization`) of the bench's requests (loadtest/bench/wrk.lua).
const BENCH_TENANT: &str = "Bearer bench-tenant";
/// `shared_buffers` of the seeded cluster.
pub const SHARED_BUFFERS: &str = "1GB";
/// Rows per `INSERT` (one transaction each, so a failure loses little).
const CHUNK: u64 = 1_000_000;

impl Bench {
    /// Makes the running bench Postgres hold at least `records` records and load
    /// `pg_stat_statements`, from the template if a fresh one exists, else by seeding
    /// (and then keeping the result as the template).
    pub fn seed_postgres(&self, records: u64) -> Res {
        self.seed_postgres_on(Ports::BENCH, records)
    }

    /// [`Bench::seed_postgres`] for the fleet on `at` (the bench's or the soak's ports):
    /// its Postgres listens on `at.postgres`, and the template is shared.
    pub fn seed_postgres_on(&self, at: Ports, records: u64) -> Res {
        let port = at.postgres;
        let cluster = Cluster::of(&self.state);
        if !cluster.running() {
            return Err("seed-postgres: postgres is not running (bench start postgres)".into());
        }
        let templates = Path::new(TEMPLATES);
        let name = format!("pg-seeded-{records}-{}-v{SEED_VERSION}", schema_hash()?);
        let template = templates.join(name);
        if fresh(&template) {
            eprintln!(
                "==> postgres: copying the seeded template {}",
                template.display()
            );
            cluster.stop(30);
            replace_dir(&template, &cluster.data())?;
            return self.restart_postgres(&cluster, port);
        }
        remove_stale_templates(templates, records);
        std::fs::create_dir_all(templates).map_err(|e| format!("{TEMPLATES}: {e}"))?;
        self.migrate_single(at)?;
        let started = std::time::Instant::now();
        psql(
            port,
            "ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'",
        )?;
        // A production-sized buffer cache for a table of gigabytes (the default 128 MB
        // would hold a tenth of its primary key).
        psql(
            port,
            &format!("ALTER SYSTEM SET shared_buffers = '{SHARED_BUFFERS}'"),
        )?;
        let have: u64 = psql(port, "SELECT count(*) FROM idemgate_records")?
            .parse()
            .map_err(|e| format!("count: {e}"))?;
        // Indexes are built once after the rows (sorted) rather than row by row.
        let rebuild = drop_indexes(port)?;
        // Pages as full as production's: there a page takes claims up to the table's
        // fillfactor (50 since migration 0004) and their completions, HOT updates in
        // place, fill the rest. Completed records inserted as such at fillfactor 50
        // would leave every page half empty, and the free space map would then hand a
        // different old page (an 8 kB full-page image in the WAL) to each new claim.
        let fillfactor = psql(
            port,
            "SELECT coalesce((SELECT option_value FROM pg_options_to_table(reloptions)
               WHERE option_name = 'fillfactor'), '100')
             FROM pg_class WHERE relname = 'idemgate_records'",
        )?;
        psql(port, "ALTER TABLE idemgate_records SET (fillfactor = 100)")?;
        let mut at = have;
        while at < records {
            let n = CHUNK.min(records - at);
            eprintln!(
                "==> postgres: seeding records {}..{} of {records}",
                at + 1,
                at + n
            );
            psql(port, &insert(at + 1, at + n))?;
            at += n;
        }
        eprintln!("==> postgres: building the indexes again");
        psql(
            port,
            &format!("SET maintenance_work_mem = '1GB'; {}", rebuild.join("; ")),
        )?;
        psql(
            port,
            &format!(
                "ALTER TABLE idemgate_records SET (fillfactor = {})",
                fillfactor.trim()
            ),
        )?;
        psql(port, "VACUUM (ANALYZE) idemgate_records")?;
        psql(port, "CHECKPOINT")?;
        eprintln!(
            "==> postgres: {records} records seeded in {:.0} s; keeping the template {}",
            started.elapsed().as_secs_f64(),
            template.display()
        );
        cluster.stop(60);
        replace_dir(&cluster.data(), &template)?;
        self.restart_postgres(&cluster, port)
    }

    /// Starts the bench cluster again and records its new postmaster pid.
    fn restart_postgres(&self, cluster: &Cluster, port: u16) -> Res {
        cluster.start(port, self.ready_timeout.as_secs())?;
        let pid = std::fs::read_to_string(cluster.data().join("postmaster.pid"))
            .map_err(|e| e.to_string())?;
        let pid = pid.lines().next().unwrap_or_default().trim().to_string();
        std::fs::write(self.pidfile("postgres"), format!("{pid}\n")).map_err(|e| e.to_string())?;
        psql(port, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")?;
        psql(port, "SELECT pg_stat_statements_reset()")?;
        Ok(())
    }

    /// `idemgate migrate` against the single Postgres on `at.postgres`.
    fn migrate_single(&self, at: Ports) -> Res {
        let config = self.state.join("idemgate-migrate.toml");
        let opts = GatewayOptions {
            ports: at,
            ..GatewayOptions::default()
        };
        std::fs::write(&config, opts.render(true)).map_err(|e| e.to_string())?;
        let out = Command::new(&self.idemgate)
            .arg("migrate")
            .arg("--config")
            .arg(&config)
            .env("NO_COLOR", "1")
            .output()
            .map_err(|e| format!("{}: {e}", self.idemgate.display()))?;
        if !out.status.success() {
            return Err(format!(
                "idemgate migrate failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(())
    }
}

/// The seeding statement for records `from..=to`.
fn insert(from: u64, to: u64) -> String {
    // The gateway's scope: SHA-256 of the length-prefixed route, then per scope header
    // 1 and the length-prefixed value (src/idempotency/scope.rs). One record in ten is
    // the bench's own tenant's, so its new keys land in a subtree of the primary key
    // that already holds a million, as a big tenant's do.
    let tenant = format!(
        "CASE WHEN i % 10 = 0 THEN '{BENCH_TENANT}' ELSE 'Bearer seed-tenant-' || (i % 100) END"
    );
    let scope = format!(
        "sha256(int8send(8) || convert_to('payments', 'UTF8') || '\\x01'::bytea || \
         int8send(octet_length({tenant})::bigint) || convert_to({tenant}, 'UTF8'))"
    );
    format!(
        "INSERT INTO idemgate_records (scope, key_hash, route, fingerprint, state, lock_token, \
           status, headers, body, created_at, completed_at, expires_at) \
         SELECT {scope}, \
                sha256(int8send(i)), 'payments', sha256(int8send(-i)), 'completed', \
                md5(i::text), 201, \
                convert_to(repeat('x-seed-header: ' || md5(i::text) || E'\\n', 1), 'UTF8'), \
                convert_to('{{\"id\":\"pay_' || md5(i::text) || '\",\"amount\":100,\"currency\":\"eur\",' \
                   || '\"status\":\"succeeded\",\"ledger\":\"' || md5((-i)::text) || '\"}}', 'UTF8'), \
                now() - interval '1 hour', now() - interval '1 hour', \
                now() + interval '{EXPIRY_DAYS} days' + (i % 86400) * interval '1 second' \
         FROM generate_series({from}::bigint, {to}::bigint) AS i \
         ON CONFLICT DO NOTHING"
    )
}

/// Drops the records table's primary key and indexes; returns the statements that
/// create them again, as the migrations made them (names and definitions).
fn drop_indexes(port: u16) -> Result<Vec<String>, String> {
    const TABLE: &str = "'idemgate_records'::regclass";
    let pk = psql(
        port,
        &format!(
            "SELECT conname || '|' || pg_get_constraintdef(oid) FROM pg_constraint \
         WHERE conrelid = {TABLE} AND contype = 'p'"
        ),
    )?;
    let indexes = psql(
        port,
        &format!(
        "SELECT indexname || '|' || indexdef FROM pg_indexes WHERE tablename = 'idemgate_records' \
         AND indexname NOT IN (SELECT conname FROM pg_constraint WHERE conrelid = {TABLE})"
    ),
    )?;
    let (mut drop, mut create) = (Vec::new(), Vec::new());
    for line in pk.lines().filter(|l| !l.is_empty()) {
        let (name, def) = line.split_once('|').ok_or("pg_constraint: no separator")?;
        drop.push(format!(
            "ALTER TABLE idemgate_records DROP CONSTRAINT {name}"
        ));
        create.push(format!(
            "ALTER TABLE idemgate_records ADD CONSTRAINT {name} {def}"
        ));
    }
    for line in indexes.lines().filter(|l| !l.is_empty()) {
        let (name, def) = line.split_once('|').ok_or("pg_indexes: no separator")?;
        drop.push(format!("DROP INDEX {name}"));
        create.push(def.to_string());
    }
    if !drop.is_empty() {
        psql(port, &drop.join("; "))?;
    }
    Ok(create)
}

fn psql(port: u16, sql: &str) -> Result<String, String> {
    let out = Command::new(Path::new(PG_BIN).join("psql"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-U", "postgres", "-At", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .map_err(|e| format!("psql: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "psql: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A short hash of every migration file (names and contents), so a schema change
/// makes a new template.
fn schema_hash() -> Result<String, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir("migrations")
        .map_err(|e| format!("migrations/: {e}"))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    // FNV-1a: stable across runs and builds, which std's hasher is not.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for f in files {
        let name = f
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let body = std::fs::read(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        for b in name.bytes().chain(body) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    Ok(format!("{:08x}", h >> 32))
}

fn fresh(template: &Path) -> bool {
    let max = Duration::from_secs(TEMPLATE_DAYS * 86_400);
    template.join("PG_VERSION").exists()
        && std::fs::metadata(template.join("PG_VERSION"))
            .and_then(|m| m.modified())
            .is_ok_and(|t| SystemTime::now().duration_since(t).unwrap_or_default() < max)
}

/// Templates of other schemas or ages for the same size: gigabytes each.
fn remove_stale_templates(home: &Path, records: u64) {
    let prefix = format!("pg-seeded-{records}-");
    for e in std::fs::read_dir(home).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            eprintln!(
                "==> postgres: removing the old template {}",
                e.path().display()
            );
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// `to` becomes a copy of `from` (ownership and modes kept: `cp -a`), written to disk
/// before it returns: left to the kernel's writeback (about 30 s later), the copy's
/// gigabytes of dirty pages made every fsync on the filesystem (Postgres' commits) wait
/// up to seconds in the first minute of a run.
fn replace_dir(from: &Path, to: &Path) -> Res {
    if to.exists() {
        std::fs::remove_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    }
    let ok = Command::new("cp")
        .args(["-a", "--reflink=auto"])
        .arg(from)
        .arg(to)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        return Err(format!("cp -a {} {} failed", from.display(), to.display()));
    }
    let synced = Command::new("sync")
        .arg("-f")
        .arg(to)
        .status()
        .is_ok_and(|s| s.success());
    synced
        .then_some(())
        .ok_or_else(|| format!("sync -f {} failed", to.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_statement_covers_its_range_and_every_required_column() {
        let sql = insert(1, 1_000_000);
        assert!(sql.contains("generate_series(1::bigint, 1000000::bigint)"));
        for col in [
            "scope",
            "key_hash",
            "route",
            "fingerprint",
            "state",
            "expires_at",
        ] {
            assert!(sql.contains(col), "{col}");
        }
    }
}
