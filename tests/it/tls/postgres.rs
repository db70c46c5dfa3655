//! Postgres over TLS with libpq's `sslmode` meanings, against a server with `ssl = on`
//! that admits TLS sessions only (`hostssl`): `verify-full` connects and stores;
//! `sslmode = disable` fails at start with an error that names the setting; a
//! certificate for the wrong name or from an untrusted CA is refused by `verify-full`,
//! while `verify-ca` ignores the name and `require` verifies nothing.

use idemgate_fleet::PgTls;

use crate::support::certs::Pair;
use crate::support::{config, read, MockUpstream, PgServer, Pki, RedisServer, TestApp};

fn tls_server(pair: &Pair) -> PgServer {
    PgServer::start_tls(PgTls {
        cert_file: pair.cert.clone(),
        key_file: pair.key.clone(),
        hostssl_only: true,
    })
}

/// The gateway's configuration with `[postgres]` at `pg` and `tls` lines in `[postgres.tls]`.
fn with_postgres(
    redis: &RedisServer,
    upstream: &MockUpstream,
    pg: &PgServer,
    tls: &str,
) -> idemgate::Config {
    let section = format!(
        "[postgres]\nurl = \"{}\"\nstatement_timeout = \"2s\"\n[postgres.tls]\n{tls}\n",
        pg.url()
    );
    config(&redis.url(), &upstream.url(), &section)
}

/// The start-up error of a gateway with this configuration (panics if it starts).
async fn start_error(config: idemgate::Config) -> String {
    match idemgate::App::build(config).await {
        Ok(_) => panic!("the gateway started"),
        Err(e) => {
            eprintln!("start-up error: {e:#}");
            format!("{e:#}")
        }
    }
}

#[tokio::test]
async fn verify_full_connects_and_disable_names_the_setting() {
    let pki = Pki::generate();
    let pg = tls_server(&pki.server);
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let root = format!("sslrootcert = \"{}\"", pki.ca.display());

    let full = with_postgres(
        &redis,
        &upstream,
        &pg,
        &format!("sslmode = \"verify-full\"\n{root}"),
    );
    let app = TestApp::spawn(full).await;
    let first = read(app.post("pg-tls", "{}").send().await.unwrap()).await;
    assert_eq!(first.0, 201);
    drop(app);

    let e = start_error(with_postgres(
        &redis,
        &upstream,
        &pg,
        "sslmode = \"disable\"",
    ))
    .await;
    assert!(e.contains("sslmode = disable") && e.contains("TLS"), "{e}");

    // The libpq form in the URL works too.
    let mut url_form = with_postgres(&redis, &upstream, &pg, "");
    let pg_config = url_form.postgres.as_mut().unwrap();
    pg_config.url = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        pg.url(),
        pki.ca.display()
    );
    idemgate::App::build(url_form).await.unwrap();
}

#[tokio::test]
async fn wrong_name_and_untrusted_ca_are_refused_by_verify_full() {
    let pki = Pki::generate();
    let pg = tls_server(&pki.wrong_name);
    let redis = RedisServer::start();
    let upstream = MockUpstream::start().await;
    let root = format!("sslrootcert = \"{}\"", pki.ca.display());
    let other = format!("sslrootcert = \"{}\"", pki.other_ca.display());

    let e = start_error(with_postgres(
        &redis,
        &upstream,
        &pg,
        &format!("sslmode = \"verify-full\"\n{root}"),
    ))
    .await;
    assert!(
        e.contains("sslmode = verify-full") && e.contains("not valid for name"),
        "{e}"
    );
    // verify-ca: the chain is right, the name is not checked.
    let ca = with_postgres(
        &redis,
        &upstream,
        &pg,
        &format!("sslmode = \"verify-ca\"\n{root}"),
    );
    idemgate::App::build(ca).await.unwrap();

    let e = start_error(with_postgres(
        &redis,
        &upstream,
        &pg,
        &format!("sslmode = \"verify-ca\"\n{other}"),
    ))
    .await;
    assert!(
        e.contains("sslmode = verify-ca") && e.contains("UnknownIssuer"),
        "{e}"
    );
    // require (no root certificate): encrypted, nothing verified.
    let require = with_postgres(&redis, &upstream, &pg, "sslmode = \"require\"");
    idemgate::App::build(require).await.unwrap();
}
