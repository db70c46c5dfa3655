//! cpu_ab's command line: the options of a run and the variants to compare.

/// `--pg`: the Postgres the variants write through to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Pg {
    /// `off`: none.
    Off,
    /// `on` (the default): the launcher's test cluster, fsync off.
    On,
    /// `durable`: one that keeps its commits (fsync on), as `make bench`'s does.
    Durable,
}

/// What the command line asks for.
pub struct Options {
    pub rounds: usize,
    pub secs: u64,
    pub conns: usize,
    pub pg: Pg,
    /// wrk's threads (`-t`) in the measured rounds: `make bench` runs 2.
    pub threads: usize,
    pub record: Option<String>,
    /// Variants run under `valgrind --tool=callgrind --callgrind-out-file=DIR/cg.%p`
    /// (give a wrapper as the binary): instructions per request, repeatable under load.
    pub callgrind: bool,
    /// `--replay`: rounds replay the keys each variant's warm-up stored (all of them
    /// replays but one key), instead of first executions.
    pub replay: bool,
    /// `--redis durable`: Redis as vouched claims rely on (AOF fsync'd before every reply)
    /// with a replica, whose CPU counts with Redis'.
    pub durable: bool,
    /// `--warm`: every warmth marker two days old, as the bench's Redis (a Redis older than
    /// the longest ttl): `lookup_on_miss = "when_cold"` then skips the Postgres lookup.
    pub warm: bool,
    /// The variants, `LABEL=BINARY[|KEY=VALUE...]`.
    pub specs: Vec<String>,
}

/// The command line's shape, printed with `--help` and after a mistake.
const USAGE: &str = "usage: cpu_ab [--rounds N] [--secs S] [--conns C] [--threads T] \
    [--pg off|on|durable] [--redis plain|durable] [--warm] [--replay] [--callgrind] \
    [--record FILE] LABEL=BINARY[|KEY=VALUE...]...";

impl Options {
    /// The options of this process' command line; a mistake (an unknown option, a
    /// missing or unreadable value, a variant without `LABEL=`, no variant) exits with
    /// the usage instead of a panic.
    pub fn parse() -> Options {
        match Self::from_args(std::env::args().skip(1)) {
            Ok(o) => o,
            Err(e) if e.is_empty() => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            Err(e) => {
                eprintln!("cpu_ab: {e}\n{USAGE}");
                std::process::exit(2);
            }
        }
    }

    /// [`Options::parse`] over `args`; `Err("")` for `--help`.
    fn from_args(mut args: impl Iterator<Item = String>) -> Result<Options, String> {
        let mut o = Options {
            rounds: 5,
            secs: 4,
            conns: 16,
            pg: Pg::On,
            threads: 1,
            record: None,
            callgrind: false,
            replay: false,
            durable: false,
            warm: false,
            specs: Vec::new(),
        };
        while let Some(a) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
            fn number<T: std::str::FromStr>(flag: &str, v: String) -> Result<T, String> {
                v.parse().map_err(|_| format!("{flag}: not a number: {v}"))
            }
            match a.as_str() {
                "-h" | "--help" => return Err(String::new()),
                "--rounds" => o.rounds = number(&a, value()?)?,
                "--secs" => o.secs = number(&a, value()?)?,
                "--conns" => o.conns = number(&a, value()?)?,
                "--threads" => o.threads = number(&a, value()?)?,
                "--pg" => {
                    o.pg = match value()?.as_str() {
                        "off" => Pg::Off,
                        "on" => Pg::On,
                        "durable" => Pg::Durable,
                        v => return Err(format!("--pg: off, on or durable, not {v}")),
                    }
                }
                "--redis" => {
                    o.durable = match value()?.as_str() {
                        "plain" => false,
                        "durable" => true,
                        v => return Err(format!("--redis: plain or durable, not {v}")),
                    }
                }
                "--record" => o.record = Some(value()?),
                "--callgrind" => o.callgrind = true,
                "--replay" => o.replay = true,
                "--warm" => o.warm = true,
                flag if flag.starts_with('-') => return Err(format!("unknown option {flag}")),
                spec => {
                    // LABEL=BINARY, then KEY=VALUE environment entries: each has its `=`.
                    if !spec.split('|').all(|part| part.contains('=')) {
                        return Err(format!(
                            "a variant is LABEL=BINARY[|KEY=VALUE...], not {spec}"
                        ));
                    }
                    o.specs.push(a);
                }
            }
        }
        if o.specs.is_empty() {
            return Err("no variant to measure".into());
        }
        Ok(o)
    }
}
