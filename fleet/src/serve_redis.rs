//! `idemgate-fleet redis`: the launcher becomes one `redis-server` with its
//! command line ([`crate::redis::command`]), for the measurement scripts that need a
//! Redis of their own (`loadtest/bench/claim_cost/callgrind.sh` and
//! `redis-scripts-callgrind/cg.py` run it under valgrind, `loadtest/bench/pg-levers.sh`
//! daemonized): the same arguments as every test, chaos scenario and bench Redis, never
//! a second copy of them.

use std::path::PathBuf;
use std::process::{Command, ExitCode};

/// What `idemgate-fleet redis` was asked for.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub port: u16,
    pub dir: PathBuf,
    /// A program (and its arguments) to run redis-server under, `--under 'valgrind ...'`.
    pub under: Vec<String>,
    /// redis-server arguments after `--`, appended (later ones win).
    pub extra: Vec<String>,
}

pub const USAGE: &str = "usage: idemgate-fleet redis --port PORT --dir DIR \
                         [--under 'PROGRAM ARGS...'] [-- REDIS-SERVER ARGS...]";

/// Reads the arguments after `redis`.
pub fn parse(args: &[String]) -> Result<Request, String> {
    let (mut port, mut dir, mut under) = (None, None, Vec::new());
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--port" => {
                let v = value()?;
                port = Some(v.parse().map_err(|_| format!("--port: not a port: {v}"))?);
            }
            "--dir" => dir = Some(PathBuf::from(value()?)),
            "--under" => under = value()?.split_whitespace().map(String::from).collect(),
            "--" => break,
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    Ok(Request {
        port: port.ok_or("--port is required")?,
        dir: dir.ok_or("--dir is required")?,
        under,
        extra: it.cloned().collect(),
    })
}

/// The command line: the launcher's, under `under` when given.
pub fn command(request: &Request) -> Command {
    let redis = crate::redis::command(request.port, &request.dir);
    let mut redis_args: Vec<_> = redis.get_args().map(|a| a.to_owned()).collect();
    redis_args.extend(request.extra.iter().map(Into::into));
    let Some((program, wrapper_args)) = request.under.split_first() else {
        let mut cmd = Command::new(redis.get_program());
        cmd.args(redis_args);
        return cmd;
    };
    let mut cmd = Command::new(program);
    cmd.args(wrapper_args)
        .arg(redis.get_program())
        .args(redis_args);
    cmd
}

/// Becomes redis-server (or its wrapper): the process is replaced (`exec`), so the
/// caller's pid, signals and exit status are the server's own (a profiler attached
/// to that pid profiles Redis).
pub fn main(args: &[String]) -> ExitCode {
    use std::os::unix::process::CommandExt as _;
    let request = match parse(args) {
        Ok(request) => request,
        Err(e) => {
            eprintln!("idemgate-fleet redis: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let e = command(&request).exec();
    eprintln!("idemgate-fleet redis: cannot run redis-server: {e}");
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split(' ').map(String::from).collect()
    }

    #[test]
    fn the_launchers_command_line_with_a_wrapper_and_extra_arguments() {
        let mut a = args("--port 17901 --dir /tmp/r -- --daemonize yes");
        a.splice(
            0..0,
            [
                "--under".to_string(),
                "valgrind --tool=callgrind".to_string(),
            ],
        );
        let request = parse(&a).unwrap();
        assert_eq!(request.under, ["valgrind", "--tool=callgrind"]);
        assert_eq!(request.extra, ["--daemonize", "yes"]);
        let cmd = command(&request);
        assert_eq!(cmd.get_program(), "valgrind");
        let line: Vec<_> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(line[..2], ["--tool=callgrind", "redis-server"]);
        assert!(line.windows(2).any(|w| w == ["--port", "17901"]));
        assert!(line.windows(2).any(|w| w == ["--appendonly", "no"]));
        assert_eq!(line[line.len() - 2..], ["--daemonize", "yes"]);
    }

    #[test]
    fn a_missing_port_or_dir_is_named() {
        assert!(parse(&args("--dir /tmp/r")).unwrap_err().contains("--port"));
        assert!(parse(&args("--port 1")).unwrap_err().contains("--dir"));
        assert!(parse(&args("--port x --dir /r"))
            .unwrap_err()
            .contains("not a port"));
    }
}
