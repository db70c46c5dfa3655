//! Schema migrations: the numbered SQL files of `migrations/`, embedded in the binary and
//! applied in order under a Postgres advisory lock, so replicas starting together are safe.
//!
//! A migration named `NNNN_name.additive.sql` only adds (tables, indexes, columns with a
//! default or nullable) what the release before it does not read, or replaces an index
//! by one that serves the same queries of that release: a binary that does not
//! know it still runs against a database that has it, so the previous release keeps
//! (re)starting during a rolling upgrade. Any other migration newer than a binary stops
//! that binary (`SchemaTooNew`). Migrations stay additive within a minor release
//! (docs/operations.md, Version policy).

use tokio_postgres::Client;

use crate::store::StoreError;

/// `(version, name, sql)` of every migration this binary knows, in order.
pub const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "0001_records.sql",
        include_str!("../../../migrations/0001_records.sql"),
    ),
    (
        2,
        "0002_fencing.sql",
        include_str!("../../../migrations/0002_fencing.sql"),
    ),
    (
        3,
        "0003_completer.additive.sql",
        include_str!("../../../migrations/0003_completer.additive.sql"),
    ),
    (
        4,
        "0004_hot_completion.additive.sql",
        include_str!("../../../migrations/0004_hot_completion.additive.sql"),
    ),
    (
        5,
        "0005_replay_until.additive.sql",
        include_str!("../../../migrations/0005_replay_until.additive.sql"),
    ),
    (
        6,
        "0006_records_autovacuum.additive.sql",
        include_str!("../../../migrations/0006_records_autovacuum.additive.sql"),
    ),
    (
        7,
        "0007_after_lapse.additive.sql",
        include_str!("../../../migrations/0007_after_lapse.additive.sql"),
    ),
    (
        8,
        "0008_redis_epochs.additive.sql",
        include_str!("../../../migrations/0008_redis_epochs.additive.sql"),
    ),
    (
        9,
        "0009_trace_origin.additive.sql",
        include_str!("../../../migrations/0009_trace_origin.additive.sql"),
    ),
];

/// The suffix of a migration that binaries before it may run beside.
pub const ADDITIVE: &str = ".additive.sql";

/// Advisory lock key shared by every replica ("idemgate" in ASCII).
const LOCK_KEY: i64 = 0x6964_656d_6761_7465;

/// The newest schema version this binary understands.
pub fn latest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.0)
}

/// Applies the missing migrations; returns the versions applied. Fails when the
/// database's schema is newer than this binary.
pub async fn run(client: &mut Client) -> Result<Vec<i32>, StoreError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&LOCK_KEY])
        .await?;
    let result = apply(client).await;
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&LOCK_KEY])
        .await;
    let applied = result?;
    unlocked?;
    Ok(applied)
}

async fn apply(client: &mut Client) -> Result<Vec<i32>, StoreError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS idemgate_schema (
                 version    integer PRIMARY KEY,
                 name       text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT now()
             )",
        )
        .await?;
    let (current, required) = versions(client).await?;
    if required > latest() {
        return Err(StoreError::SchemaTooNew {
            database: current,
            binary: latest(),
        });
    }
    let mut applied = Vec::new();
    for (version, name, sql) in MIGRATIONS.iter().filter(|m| m.0 > current) {
        let tx = client.transaction().await?;
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO idemgate_schema (version, name) VALUES ($1, $2)",
            &[version, name],
        )
        .await?;
        tx.commit().await?;
        tracing::info!(version, name, "applied migration");
        applied.push(*version);
    }
    Ok(applied)
}

/// The schema version of the database (0 before any migration), and the version a
/// binary must know to run against it: the newest migration not named [`ADDITIVE`].
pub async fn current(client: &Client) -> Result<(i32, i32), StoreError> {
    let exists: bool = client
        .query_one("SELECT to_regclass('idemgate_schema') IS NOT NULL", &[])
        .await?
        .get(0);
    if !exists {
        return Ok((0, 0));
    }
    versions(client).await
}

async fn versions(client: &Client) -> Result<(i32, i32), StoreError> {
    let row = client
        .query_one(
            "SELECT coalesce(max(version), 0), \
                    coalesce(max(version) FILTER (WHERE name NOT LIKE '%' || $1), 0) \
             FROM idemgate_schema",
            &[&ADDITIVE],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `MIGRATIONS` is the `migrations/` folder, file for file: numbered from 1 without
    /// a gap, each version the number its name starts with, and no file left out (a
    /// file that is not listed would never be applied).
    #[test]
    fn the_list_is_the_migrations_folder() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|name| name.ends_with(".sql"))
            .collect();
        files.sort();
        let listed: Vec<String> = MIGRATIONS.iter().map(|m| m.1.to_string()).collect();
        assert_eq!(listed, files, "MIGRATIONS and migrations/ differ");
        for (i, (version, name, sql)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(*version, i as i32 + 1, "{name}: numbered without a gap");
            assert_eq!(&name[..4], format!("{version:04}"), "{name}: its number");
            let on_disk = std::fs::read_to_string(format!("{dir}/{name}")).unwrap();
            assert_eq!(*sql, on_disk, "{name}: the embedded text is the file's");
        }
    }
}
