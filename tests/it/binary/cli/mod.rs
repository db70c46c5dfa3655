//! The `idemgate` binary as an operator runs it: reading a configuration ([`config`]),
//! `serve` as a process ([`serve`]), the other subcommands ([`commands`]), and what they
//! share here: a `check-config` run, a `serve` process on free ports, SIGTERM, `health`.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support::process::{config_file, until_ready, BIN};
use crate::support::{MockUpstream, RedisServer};

mod commands;
mod config;
mod serve;

pub(super) const ROUTE: &str = "[[routes]]\nname = \"payments\"\npath_prefix = \"/v1/\"\n\
                     upstream = \"http://127.0.0.1:3000\"\nupstream_timeout = \"20s\"\n";

pub(super) fn check(file: &tempfile::NamedTempFile, env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("check-config")
        .arg("--config")
        .arg(file.path())
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (
        out.status.code().unwrap(),
        text(out.stdout),
        text(out.stderr),
    )
}

/// A running `idemgate serve` on free ports; `extra` TOML is appended.
pub(super) struct Served {
    pub(super) child: std::process::Child,
    pub(super) listen: u16,
    pub(super) admin: u16,
    _file: tempfile::NamedTempFile,
}

pub(super) async fn serve(
    redis: &RedisServer,
    upstream: &MockUpstream,
    extra: &str,
    stderr: Stdio,
) -> Served {
    let (listen, admin) = (idemgate_fleet::free_port(), idemgate_fleet::free_port());
    let file = config_file(&format!(
        "[server]\nlisten = \"127.0.0.1:{listen}\"\nadmin_listen = \"127.0.0.1:{admin}\"\n\
         shutdown_grace = \"10s\"\n[redis]\nurl = \"{}\"\n{extra}\n[[routes]]\nname = \"p\"\n\
         path_prefix = \"/v1/\"\nupstream = \"{}\"\nupstream_timeout = \"5s\"\n\
         [routes.idempotency]\nanonymous = \"shared\"\n",
        redis.url(),
        upstream.url()
    ));
    let mut child = Command::new(BIN)
        .arg("serve")
        .env("IDEMGATE_CONFIG", file.path())
        .env_remove("RUST_LOG")
        .stderr(stderr)
        .spawn()
        .unwrap();
    until_ready(&mut child, admin, Duration::from_secs(15)).await;
    Served {
        child,
        listen,
        admin,
        _file: file,
    }
}

pub(super) fn sigterm(child: &std::process::Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Kills the gateway even when the test fails half way.
pub(super) struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `idemgate health --config FILE`: its exit code and what it printed.
pub(super) fn health(file: &tempfile::NamedTempFile) -> (i32, String) {
    let out = Command::new(BIN)
        .args(["health", "--timeout", "3s", "--config"])
        .arg(file.path())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap(), text)
}
