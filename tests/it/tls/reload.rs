//! The proxy listener's certificate (`[server.tls]`) on the `idemgate` binary: read
//! again on SIGHUP and when its files change, new handshakes seeing the new one; a file
//! that cannot be used keeps the certificate in use, with one warning; start-up and
//! `check-config` errors name the key.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use idemgate_fleet::free_port as port;

use crate::support::certs::Pair;
use crate::support::process::BIN;
use crate::support::{eventually, Pki, RedisServer};

/// A configuration file whose `[server.tls]` names `cert` and `key`, with `server`
/// settings.
fn config_file(dir: &Path, redis: &str, listen: u16, cert: &Path, key: &Path) -> PathBuf {
    config_with(dir, redis, (listen, ""), cert, key)
}

fn config_with(
    dir: &Path,
    redis: &str,
    (listen, server): (u16, &str),
    cert: &Path,
    key: &Path,
) -> PathBuf {
    let path = dir.join("idemgate.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:{listen}\"\nadmin_listen = \"127.0.0.1:{}\"\n{server}\n\
         [server.tls]\ncert = \"{}\"\nkey = \"{}\"\n[redis]\nurl = \"{redis}\"\n",
        port(),
        cert.display(),
        key.display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Copies `pair` over `cert` and `key`, each replaced at once (written aside, renamed).
fn install(pair: &Pair, cert: &Path, key: &Path) {
    for (from, to) in [(&pair.key, key), (&pair.cert, cert)] {
        let aside = to.with_extension("new");
        std::fs::copy(from, &aside).unwrap();
        std::fs::rename(&aside, to).unwrap();
    }
}

/// Whether a TLS client trusting `ca` completes a handshake with the listener on
/// `port` for the name `host` (and gets any HTTP answer).
fn trusted_as(ca: &Path, port: u16, host: &str) -> bool {
    let status = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "--max-time", "5", "--cacert"])
        .arg(ca)
        .arg("--resolve")
        .arg(format!("{host}:{port}:127.0.0.1"))
        .arg(format!("https://{host}:{port}/healthz"))
        .status()
        .unwrap();
    status.success()
}

fn sighup(child: &Child) {
    let status = Command::new("kill")
        .args(["-HUP", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// How many lines of the log say a reload failed.
fn failed_reloads(log: &Path) -> usize {
    let text = std::fs::read_to_string(log).unwrap();
    text.lines().filter(|l| l.contains("reload failed")).count()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `idemgate serve` with `server` settings, presenting `pki.server` from files in
/// `dir` (`tls.crt`, `tls.key`); its log in `dir/stderr.log`. Returns it and its port.
fn serve(dir: &Path, pki: &Pki, redis: &RedisServer, server: &str) -> (Killed, u16) {
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    install(&pki.server, &cert, &key);
    let listen = port();
    let file = config_with(dir, &redis.url(), (listen, server), &cert, &key);
    let log = dir.join("stderr.log");
    let child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&file)
        .env_remove("RUST_LOG")
        .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
        .spawn()
        .unwrap();
    (Killed(child), listen)
}

#[tokio::test]
async fn sighup_and_changed_files_reload_the_certificate_and_a_bad_file_keeps_the_old_one() {
    let pki = Pki::generate();
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let (child, listen) = serve(dir.path(), &pki, &redis, "");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let log = dir.path().join("stderr.log");
    let ca = pki.ca.clone();
    let as_localhost = || trusted_as(&ca, listen, "localhost");
    let as_wrong = || trusted_as(&ca, listen, "wrong.example");
    assert!(
        eventually(Duration::from_secs(15), async || as_localhost()).await,
        "never served TLS"
    );
    assert!(!as_wrong(), "the first certificate names wrong.example");

    // SIGHUP after the files were replaced: new handshakes get the new certificate.
    install(&pki.wrong_name, &cert, &key);
    sighup(&child.0);
    assert!(
        eventually(Duration::from_secs(5), async || as_wrong()).await,
        "the new certificate was not presented after SIGHUP"
    );
    assert!(!as_localhost(), "the old certificate is still presented");
    assert_eq!(failed_reloads(&log), 0);

    // A certificate file that is not PEM: found by the file check, warned about once,
    // and the certificate in use stays.
    std::fs::write(&cert, "not a certificate\n").unwrap();
    assert!(
        eventually(Duration::from_secs(12), async || failed_reloads(&log) == 1).await,
        "no warning for a broken certificate file"
    );
    assert!(as_wrong(), "a broken file replaced the certificate in use");
    tokio::time::sleep(idemgate_poll() + Duration::from_secs(1)).await;
    assert_eq!(
        failed_reloads(&log),
        1,
        "a file left broken is warned about once"
    );
    // A SIGHUP with it still broken: one more warning, the same certificate.
    sighup(&child.0);
    assert!(eventually(Duration::from_secs(5), async || failed_reloads(&log) == 2).await);
    assert!(as_wrong());

    // A key that does not go with the certificate is refused too.
    std::fs::copy(&pki.server.cert, &cert).unwrap();
    sighup(&child.0);
    assert!(eventually(Duration::from_secs(5), async || failed_reloads(&log) >= 3).await);
    assert!(as_wrong() && !as_localhost(), "a mismatched pair was taken");

    // The files changed, no signal: the poll finds the new pair.
    install(&pki.server, &cert, &key);
    assert!(
        eventually(Duration::from_secs(12), async || as_localhost()).await,
        "changed files were not picked up"
    );
    assert!(!as_wrong());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("certificate reloaded"), "{text}");
}

#[tokio::test]
async fn thread_per_core_workers_share_the_certificate_and_its_reload() {
    let pki = Pki::generate();
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let server = "runtime = \"thread_per_core\"\nworkers = 2";
    let (child, listen) = serve(dir.path(), &pki, &redis, server);
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let ca = pki.ca.clone();
    assert!(
        eventually(Duration::from_secs(15), async || trusted_as(
            &ca,
            listen,
            "localhost"
        ))
        .await,
        "never served TLS"
    );
    install(&pki.wrong_name, &cert, &key);
    sighup(&child.0);
    assert!(
        eventually(Duration::from_secs(5), async || trusted_as(
            &ca,
            listen,
            "wrong.example"
        ))
        .await
    );
    // Each connection lands on either worker (SO_REUSEPORT): every one sees the new
    // certificate.
    for i in 0..12 {
        assert!(trusted_as(&ca, listen, "wrong.example"), "connection {i}");
        assert!(!trusted_as(&ca, listen, "localhost"), "connection {i}");
    }
    let text = std::fs::read_to_string(dir.path().join("stderr.log")).unwrap();
    let on_sighup = |l: &&str| l.contains("certificate reloaded") && l.contains("SIGHUP");
    let reloads = text.lines().filter(on_sighup).count();
    assert_eq!(reloads, 1, "one watcher per process: {text}");
}

/// How often the gateway looks at the files.
fn idemgate_poll() -> Duration {
    Duration::from_secs(5)
}

/// `check-config` with the configuration of `cert` and `key`: (exit code, stderr).
fn check_config(cert: &Path, key: &Path) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = config_file(dir.path(), "redis://127.0.0.1:6379", port(), cert, key);
    let out = Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    (out.status.code().unwrap(), stderr)
}

#[test]
fn check_config_and_serve_read_the_files_and_name_the_key() {
    let pki = Pki::generate();
    let (code, stderr) = check_config(&pki.server.cert, &pki.server.key);
    assert_eq!(code, 0, "{stderr}");

    let missing = Path::new("/nonexistent/tls.crt");
    let (code, stderr) = check_config(missing, &pki.server.key);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("server.tls.cert"), "{stderr}");
    assert!(
        stderr.contains("cannot read /nonexistent/tls.crt"),
        "{stderr}"
    );

    let (code, stderr) = check_config(&pki.server.cert, &pki.wrong_name.key);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("server.tls.key"), "{stderr}");
    assert!(stderr.contains("does not go with"), "{stderr}");

    let (code, stderr) = check_config(&pki.server.key, &pki.server.key);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("server.tls.cert"), "{stderr}");

    // `serve` refuses to start on the same error.
    let dir = tempfile::tempdir().unwrap();
    let file = config_file(
        dir.path(),
        "redis://127.0.0.1:1",
        port(),
        missing,
        &pki.server.key,
    );
    let started = Instant::now();
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("server.tls.cert"), "{stderr}");
    assert!(
        stderr.contains("cannot read /nonexistent/tls.crt"),
        "{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}
