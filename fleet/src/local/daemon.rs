//! Detached processes named by pid files, as `deploy/local/lib.sh` keeps them in
//! `.state/`: a pid file is trusted only while it names a live, non-zombie process
//! whose program is the expected one (guards against pid reuse); stopping is SIGTERM,
//! a grace period, then SIGKILL.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A live process that is not a zombie.
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "PID (comm) S ...": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// The program name (argv0's file name) of `pid` is `name`.
pub fn program_is(pid: u32, name: &str) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let argv0 = cmdline.split(|b| *b == 0).next().unwrap_or_default();
    let argv0 = String::from_utf8_lossy(argv0);
    let argv0 = argv0.split(' ').next().unwrap_or_default();
    argv0.rsplit('/').next() == Some(name)
}

/// The pid a pid file holds, if it parses.
pub fn read_pid(pidfile: &Path) -> Option<u32> {
    std::fs::read_to_string(pidfile).ok()?.trim().parse().ok()
}

/// The pid file names a live process whose program is `name`.
pub fn alive(pidfile: &Path, name: &str) -> Option<u32> {
    let pid = read_pid(pidfile)?;
    (pid_alive(pid) && program_is(pid, name)).then_some(pid)
}

/// Starts `cmd` detached (own process group, so a Ctrl-C on the launcher does not
/// reach it; stdin from /dev/null), output appended to `logfile` after a header line,
/// pid in `pidfile`. A log past 64 MiB is first moved to `logfile.1`.
/// Never waited for: it outlives the launcher, whose exit hands it to init.
#[allow(clippy::zombie_processes)]
pub fn launch(name: &str, pidfile: &Path, logfile: &Path, cmd: &mut Command) -> u32 {
    if std::fs::metadata(logfile).is_ok_and(|m| m.len() > 64 * 1024 * 1024) {
        let _ = std::fs::rename(logfile, logfile.with_extension("log.1"));
    }
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(logfile)
        .unwrap_or_else(|e| panic!("{}: {e}", logfile.display()));
    let now = Command::new("date").arg("-Is").output().map(|o| o.stdout);
    let now = String::from_utf8_lossy(&now.unwrap_or_default())
        .trim()
        .to_string();
    let _ = writeln!(log, "\n---- {now} starting {name} ----");
    let child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
    std::fs::write(pidfile, format!("{}\n", child.id())).unwrap();
    child.id()
}

fn kill(sig: &str, pid: u32) {
    let _ = Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// SIGTERM to the process `pidfile` names if it is alive and still `name`; its pid
/// (`None` when there is nothing to wait for). Stale pid files are removed.
pub fn signal_pidfile(name: &str, pidfile: &Path) -> Option<u32> {
    let pid = read_pid(pidfile);
    let Some(pid) = pid.filter(|p| pid_alive(*p)) else {
        println!(
            "==> {name} not running (stale pid file {})",
            pidfile.display()
        );
        let _ = std::fs::remove_file(pidfile);
        return None;
    };
    if !program_is(pid, name) {
        println!("==> {name}: pid {pid} now belongs to another program; leaving it alone");
        let _ = std::fs::remove_file(pidfile);
        return None;
    }
    println!("==> stopping {name} (pid {pid}, SIGTERM)");
    kill("-TERM", pid);
    Some(pid)
}

/// Waits for `pids` to exit; SIGKILLs any still alive after `grace`.
pub fn wait_exit(grace: Duration, name: &str, pids: &[u32]) {
    let gone = |within: Duration| {
        let deadline = Instant::now() + within;
        loop {
            if !pids.iter().any(|p| pid_alive(*p)) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    if gone(grace) {
        return;
    }
    for pid in pids.iter().copied().filter(|p| pid_alive(*p)) {
        eprintln!(
            "warning: {name} (pid {pid}) did not exit within {}s; sending SIGKILL",
            grace.as_secs()
        );
        kill("-KILL", pid);
    }
    gone(Duration::from_secs(2));
}

/// SIGTERM, wait up to `grace`, SIGKILL; removes the pid file.
pub fn stop(name: &str, pidfile: &Path, grace: Duration) {
    if !pidfile.exists() {
        println!("==> {name} not running");
        return;
    }
    if let Some(pid) = signal_pidfile(name, pidfile) {
        wait_exit(grace, name, &[pid]);
        let _ = std::fs::remove_file(pidfile);
    }
}

/// SIGTERM all of `pidfiles` (gateway replicas) at once, then wait; removes them.
pub fn stop_all(name: &str, pidfiles: &[std::path::PathBuf], grace: Duration) {
    let pids: Vec<u32> = (pidfiles.iter())
        .filter_map(|f| signal_pidfile(name, f))
        .collect();
    if !pids.is_empty() {
        wait_exit(grace, name, &pids);
    }
    for f in pidfiles {
        let _ = std::fs::remove_file(f);
    }
}
