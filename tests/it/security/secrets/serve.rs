//! The gateway processes of the secrets test and what it reads of them: `serve` (its
//! `/readyz` bodies scanned), `check-config` (its output scanned), the secret files.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::assert_clean;
use crate::support::process::BIN;

/// An `idemgate serve` child, killed on drop (a failing assertion never leaves it running).
pub(super) struct Serve {
    child: Child,
    log: PathBuf,
}

impl Serve {
    /// Starts `serve` with `config`, appending its stderr (the JSON log) to `log`.
    pub(super) fn start(config: &Path, log: &Path) -> Self {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let child = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(config)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::from(out))
            .spawn()
            .unwrap();
        Serve {
            child,
            log: log.to_path_buf(),
        }
    }

    /// SIGTERM and wait for a clean exit (the shutdown path logs too).
    pub(super) fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Panics (with the log) if the process has exited.
    fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            panic!("serve exited ({status}):\n{log}");
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Asks `/readyz` until its answer satisfies `want`; returns (status, body).
pub(super) async fn readyz_until(
    serve: &mut Serve,
    admin: u16,
    what: &str,
    want: impl Fn(u16, &serde_json::Value) -> bool,
) -> (u16, String) {
    let client = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{admin}/readyz");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = String::from("(no answer)");
    loop {
        serve.assert_running();
        if let Ok(r) = client.get(&url).send().await {
            let status = r.status().as_u16();
            let body = r.text().await.unwrap();
            assert_clean("a /readyz body", &body);
            let json: serde_json::Value = serde_json::from_str(&body).unwrap();
            if want(status, &json) {
                return (status, body);
            }
            last = format!("{status} {body}");
        }
        assert!(
            Instant::now() < deadline,
            "/readyz never showed {what}; last: {last}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The stores `/readyz` lists as down.
pub(super) fn down(json: &serde_json::Value) -> Vec<&str> {
    (json["down"].as_array().unwrap().iter())
        .map(|d| d.as_str().unwrap())
        .collect()
}

/// The test's files: secrets and configurations.
pub(super) struct Files(pub(super) tempfile::TempDir);

impl Files {
    /// Writes `text` to the file `name`; its path.
    pub(super) fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.path().join(name);
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
        path
    }
}

/// Runs `check-config`; (success, stdout + stderr), scanned.
pub(super) fn check_config(config: &Path) -> (bool, String) {
    let out = Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(config)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let mut shown = String::from_utf8_lossy(&out.stdout).into_owned();
    shown.push_str(&String::from_utf8_lossy(&out.stderr));
    assert_clean("check-config", &shown);
    (out.status.success(), shown)
}
