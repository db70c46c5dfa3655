//! The `idemgate` binary run as a process by the tests: its path, a configuration file,
//! and waiting until a process is ready (one the test spawned itself, or a fleet
//! `Replica` that [`serve_process`] starts).

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// The `idemgate` binary cargo built for these tests.
pub const BIN: &str = env!("CARGO_BIN_EXE_idemgate");

/// `text` in a temporary file (removed on drop).
pub fn config_file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

/// Waits until `child`'s admin listener on local port `admin` answers `/readyz` with
/// 200; panics when it does not within `within`, or at once when `child` exits (with its
/// status and, where it goes to a pipe, what it wrote to stderr: a port another test
/// took shows there).
pub async fn until_ready(child: &mut std::process::Child, admin: u16, within: Duration) {
    let (http, ready) = (
        reqwest::Client::new(),
        format!("http://127.0.0.1:{admin}/readyz"),
    );
    let deadline = Instant::now() + within;
    while !(http.get(&ready).send().await).is_ok_and(|r| r.status() == 200) {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            if let Some(pipe) = child.stderr.as_mut() {
                let _ = std::io::Read::read_to_string(pipe, &mut stderr);
            }
            panic!("gateway exited before it was ready ({status}): {stderr}");
        }
        assert!(
            Instant::now() < deadline,
            "gateway did not become ready within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the `idemgate serve` process `replica` answers `/readyz` with 200;
/// panics with its log if it exits or is not ready `within`.
pub async fn wait_ready(
    http: &reqwest::Client,
    replica: &mut idemgate_fleet::Replica,
    within: Duration,
) {
    let deadline = Instant::now() + within;
    loop {
        let r = http
            .get(format!("{}/readyz", replica.admin_url()))
            .send()
            .await;
        if r.is_ok_and(|r| r.status() == 200) {
            return;
        }
        assert!(
            replica.running() && Instant::now() < deadline,
            "replica {} not ready; its log:\n{}",
            replica.index,
            replica.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts an `idemgate serve` process (fleet `Replica`, index 0) on free ports, with
/// `toml` after its `[server]` listeners (so `toml` holds no `[server]` of its own),
/// written to `dir/<name>.toml`, its log to `dir/<name>.log`; waits until it is ready.
pub async fn serve_process(dir: &Path, name: &str, toml: &str) -> idemgate_fleet::Replica {
    let (port, admin) = (idemgate_fleet::free_port(), idemgate_fleet::free_port());
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n{toml}"
    );
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(&config, toml).unwrap();
    let bin = Path::new(BIN);
    let log = dir.join(format!("{name}.log"));
    let mut replica = idemgate_fleet::Replica::new(bin, 0, port, admin, config, log);
    replica.start();
    let within = Duration::from_secs(20);
    wait_ready(&reqwest::Client::new(), &mut replica, within).await;
    replica
}
