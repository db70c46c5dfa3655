//! `idemgate-fleet postgres up|down|data`: a Postgres of a measurement script's own,
//! kept between runs under a state directory (`loadtest/bench/pg-lib.sh`: the seeded
//! tables of `pg-levers.sh` and `pg-shapes.sh` take minutes to fill), created and run
//! the way the local fleet runs its own ([`crate::local::pg::Cluster`]: `initdb` once,
//! as the `postgres` account under root, TCP on 127.0.0.1 only).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::local::pg::Cluster;

pub const USAGE: &str = "usage: idemgate-fleet postgres up --state DIR --port PORT [--conf 'LINES']
       idemgate-fleet postgres down --state DIR
       idemgate-fleet postgres data --state DIR   (prints the data directory)";

/// What `idemgate-fleet postgres` was asked for.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub verb: String,
    pub state: PathBuf,
    pub port: Option<u16>,
    /// Lines added to `postgresql.conf` when the cluster is created.
    pub conf: String,
}

/// Reads the arguments after `postgres`.
pub fn parse(args: &[String]) -> Result<Request, String> {
    let mut it = args.iter();
    let verb = it.next().cloned().unwrap_or_default();
    if !matches!(verb.as_str(), "up" | "down" | "data") {
        return Err(format!("unknown verb `{verb}`"));
    }
    let (mut state, mut port, mut conf) = (None, None, String::new());
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--state" => state = Some(PathBuf::from(value()?)),
            "--port" => {
                let v = value()?;
                port = Some(v.parse().map_err(|_| format!("--port: not a port: {v}"))?);
            }
            "--conf" => conf = value()?,
            other => return Err(format!("unexpected argument `{other}`")),
        }
    }
    if verb == "up" && port.is_none() {
        return Err("up needs --port".into());
    }
    Ok(Request {
        verb,
        state: state.ok_or("--state is required")?,
        port,
        conf,
    })
}

fn up(request: &Request) -> Result<(), String> {
    std::fs::create_dir_all(&request.state).map_err(|e| e.to_string())?;
    let mut cluster = Cluster::of(&request.state);
    cluster.place(&request.state)?;
    if !cluster.initialized() {
        cluster.init(&request.state.join("initdb.log"))?;
        let conf = cluster.data().join("postgresql.conf");
        let mut file = (std::fs::OpenOptions::new().append(true).open(&conf))
            .map_err(|e| format!("{}: {e}", conf.display()))?;
        writeln!(file, "{}", request.conf).map_err(|e| e.to_string())?;
    }
    if cluster.running() {
        return Ok(());
    }
    cluster.start(request.port.expect("parse checked it"), 60)
}

/// Runs the verb; exit 0 when it did what it says.
pub fn main(args: &[String]) -> ExitCode {
    let request = match parse(args) {
        Ok(request) => request,
        Err(e) => {
            eprintln!("idemgate-fleet postgres: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let done = match request.verb.as_str() {
        "up" => up(&request),
        "down" => {
            Cluster::of(&request.state).stop(30);
            Ok(())
        }
        _ => {
            println!("{}", Cluster::of(&request.state).data().display());
            Ok(())
        }
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idemgate-fleet postgres: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split(' ').map(String::from).collect()
    }

    #[test]
    fn verbs_and_their_arguments() {
        let up = parse(&args("up --state /tmp/s --port 55433")).unwrap();
        assert_eq!((up.verb.as_str(), up.port), ("up", Some(55433)));
        let mut with_conf = args("up --state /tmp/s --port 1");
        with_conf.extend(["--conf".into(), "shared_buffers = 2GB\nfsync = on".into()]);
        assert_eq!(
            parse(&with_conf).unwrap().conf,
            "shared_buffers = 2GB\nfsync = on"
        );
        assert!(parse(&args("up --state /tmp/s"))
            .unwrap_err()
            .contains("--port"));
        assert!(parse(&args("down --port 1"))
            .unwrap_err()
            .contains("--state"));
        assert!(parse(&args("start --state /s"))
            .unwrap_err()
            .contains("start"));
        assert_eq!(parse(&args("data --state /s")).unwrap().port, None);
    }
}
