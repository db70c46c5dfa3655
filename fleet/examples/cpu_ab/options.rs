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

impl Options {
    /// The options of this process' command line.
    pub fn parse() -> Options {
        let mut args = std::env::args().skip(1);
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
            match a.as_str() {
                "--rounds" => o.rounds = args.next().unwrap().parse().unwrap(),
                "--secs" => o.secs = args.next().unwrap().parse().unwrap(),
                "--conns" => o.conns = args.next().unwrap().parse().unwrap(),
                "--pg" => {
                    o.pg = match args.next().unwrap().as_str() {
                        "on" => Pg::On,
                        "durable" => Pg::Durable,
                        _ => Pg::Off,
                    }
                }
                "--threads" => o.threads = args.next().unwrap().parse().unwrap(),
                "--record" => o.record = args.next(),
                "--callgrind" => o.callgrind = true,
                "--replay" => o.replay = true,
                "--redis" => o.durable = args.next().unwrap() == "durable",
                "--warm" => o.warm = true,
                _ => o.specs.push(a),
            }
        }
        o
    }
}
