//! A real PostgreSQL server per test (from the fleet launcher, `fleet/src/postgres.rs`:
//! `initdb` into a temp dir, `postgres` on a free loopback port, as the `postgres`
//! account under root, `fsync=off`, killed on drop) plus a client to inspect it.

use std::ops::{Deref, DerefMut};

pub struct PgServer(idemgate_fleet::PgServer);

impl Deref for PgServer {
    type Target = idemgate_fleet::PgServer;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for PgServer {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl PgServer {
    pub fn start() -> Self {
        Self(idemgate_fleet::PgServer::start())
    }

    /// A server on `host` (a namespace of the launcher's `NetLab`).
    #[allow(dead_code)] // the chaos suite's partition scenarios
    pub fn start_on(host: &idemgate_fleet::Host) -> Self {
        Self(idemgate_fleet::PgServer::start_on(host))
    }

    /// A server with `ssl = on` (see the launcher's `PgTls`).
    pub fn start_tls(tls: idemgate_fleet::PgTls) -> Self {
        Self(idemgate_fleet::PgServer::start_tls(tls))
    }

    /// A client for inspecting the database from a test.
    pub async fn client(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.url(), tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
    }

    /// Rows in the records table.
    pub async fn count(&self, filter: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM idemgate_records WHERE {filter}");
        self.client()
            .await
            .query_one(&sql, &[])
            .await
            .unwrap()
            .get(0)
    }

    /// How many statements wrote the records table's rows: rows written by one
    /// statement share its transaction id (`xmin`).
    pub async fn writing_statements(&self) -> i64 {
        let sql = "SELECT count(DISTINCT xmin::text) FROM idemgate_records";
        self.client()
            .await
            .query_one(sql, &[])
            .await
            .unwrap()
            .get(0)
    }
}
