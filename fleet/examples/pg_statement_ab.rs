//! Side-by-side Postgres cost of forms of the write-through insert, bound as the
//! gateway binds it.
//!
//! Each variant is `gateway`, the gateway's insert of completed records whose claims
//! Redis held alone (`INSERT_NEW`) as this tree sends it (read from
//! `src/store/postgres/completions.rs`), or a SQL file taking the same ten array
//! parameters, one element per
//! record, in the gateway's order and types (`$1` scope `bytea[]`, `$2` key hash
//! `bytea[]`, `$3` route `text[]`, `$4` fingerprint `bytea[]`, `$5` lock token `text[]`,
//! `$6` status `int2[]`, `$7` headers `bytea[]`, `$8` body `bytea[]`, `$9` milliseconds
//! left `int8[]`, `$10` trace origin `bytea[]`), sent in binary by tokio-postgres as the
//! gateway's writer sends them: the parts of a statement that a `pgbench` script does
//! not reach (binding, `array_recv`, the executor over parameters) are measured too.
//! `loadtest/bench/statements/unnest.sql` is the form the gateway sent before; the
//! upsert and the write-through claim are not measured alone.
//!
//! Each variant has a session of its own. A round runs each variant alone for `--secs`,
//! one statement at a time of `--records` records with random key hashes under one
//! tenant's scope (with `--spread`, of 1 to 2N - 1 records, mean N, as the writer's
//! rounds vary), and reads the CPU of every process of the Postgres on `--port`
//! (`probe::pg_cpu`) over that window. Rounds start one variant later than the one
//! before. Printed per round and as medians (of an even count, the mean of the middle
//! two): Postgres CPU µs per record and per statement.
//!
//! Options: `--port` (55990), `--records` N (10), `--spread`, `--secs` (5), `--rounds`
//! (6).
//!
//! ```sh
//! bash loadtest/bench/pg-statement-cost.sh setup     # a seeded Postgres on :55990
//! cargo run --release -p idemgate-fleet --example pg_statement_ab -- \
//!     --records 10 --rounds 8 A=loadtest/bench/statements/unnest.sql B=gateway
//! ```

use std::time::{Duration, Instant};

use idemgate_fleet::probe::pg_cpu;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Statement};

struct Variant {
    label: String,
    client: Client,
    statement: Statement,
    /// Postgres CPU µs per record, per round.
    per_record: Vec<f64>,
    /// Postgres CPU µs per statement, per round.
    per_statement: Vec<f64>,
}

const FLAGS: [&str; 4] = ["--port", "--records", "--secs", "--rounds"];

/// The value after `name`, or `default`; a value that does not parse stops the run.
fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T
where
    T::Err: std::fmt::Display,
{
    (args.windows(2))
        .find(|w| w[0] == name)
        .map_or(default, |w| {
            (w[1].parse()).unwrap_or_else(|e| panic!("{name} {}: {e}", w[1]))
        })
}

/// xorshift64*: random key hashes, spread over the tenant's part of the primary key as
/// SHA-256 ids are.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

fn random32(state: &mut u64) -> Vec<u8> {
    (0..4).flat_map(|_| next(state).to_le_bytes()).collect()
}

/// One statement of `n` records shaped as the gateway's: one tenant's scope, the demo's
/// route, a 40-byte header block, a 150-byte body, a day to live.
async fn run_once(v: &Variant, n: usize, rng: &mut u64) {
    let scopes = vec![vec![7u8; 32]; n];
    let ids: Vec<Vec<u8>> = (0..n).map(|_| random32(rng)).collect();
    let routes = vec!["payments"; n];
    let fingerprints: Vec<Vec<u8>> = (0..n).map(|_| random32(rng)).collect();
    let tokens = vec!["0123456789abcdef0123456789abcdef"; n];
    let statuses = vec![200i16; n];
    let headers = vec![vec![0u8; 40]; n];
    let bodies = vec![vec![b'x'; 150]; n];
    let ms = vec![86_400_000i64; n];
    let origins: Vec<Option<Vec<u8>>> = vec![None; n];
    let params: [&(dyn ToSql + Sync); 10] = [
        &scopes,
        &ids,
        &routes,
        &fingerprints,
        &tokens,
        &statuses,
        &headers,
        &bodies,
        &ms,
        &origins,
    ];
    (v.client.execute(&v.statement, &params).await).expect(&v.label);
}

/// The SQL of a variant: `gateway` is the string of `insert_completed!` in the
/// gateway's source; anything else names a file.
fn statement_sql(source: &str) -> String {
    if source != "gateway" {
        return std::fs::read_to_string(source).unwrap_or_else(|e| panic!("{source}: {e}"));
    }
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../src/store/postgres/completions.rs"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let after = (text.split_once("macro_rules! insert_completed"))
        .expect("completions.rs defines insert_completed!")
        .1;
    let sql = after.split('"').nth(1).expect("the macro's string literal");
    assert!(
        sql.trim_start().starts_with("INSERT INTO idemgate_records"),
        "{sql}"
    );
    sql.to_string()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let m = xs.len() / 2;
    if xs.len() % 2 == 0 {
        (xs[m - 1] + xs[m]) / 2.0
    } else {
        xs[m]
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    for (i, a) in args.iter().enumerate() {
        let value = i > 0 && FLAGS.contains(&args[i - 1].as_str());
        let known = FLAGS.contains(&a.as_str()) || a == "--spread";
        assert!(
            value || known || (a.contains('=') && !a.starts_with('-')),
            "{a}: usage: [--port P] [--records N] [--spread] [--secs S] [--rounds R] LABEL=file.sql|gateway ..."
        );
    }
    let port: u16 = arg(&args, "--port", 55990);
    let n: usize = arg(&args, "--records", 10);
    let secs: u64 = arg(&args, "--secs", 5);
    let rounds: usize = arg(&args, "--rounds", 6);
    assert!(
        n >= 1 && secs >= 1 && rounds >= 1,
        "--records, --secs and --rounds: at least 1"
    );
    let spread = args.iter().any(|a| a == "--spread");
    let url = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
    let mut variants = Vec::new();
    for spec in args
        .iter()
        .filter(|a| a.contains('=') && !a.starts_with('-'))
    {
        let (label, source) = spec.split_once('=').unwrap();
        let sql = statement_sql(source);
        let (client, connection) = tokio_postgres::connect(&url, NoTls).await.expect(&url);
        tokio::spawn(connection);
        let statement = client.prepare(&sql).await.expect(source);
        variants.push(Variant {
            label: label.to_string(),
            client,
            statement,
            per_record: Vec::new(),
            per_statement: Vec::new(),
        });
    }
    assert!(
        !variants.is_empty(),
        "no variant: LABEL=file.sql|gateway ..."
    );
    let mut rng = 0x9e37_79b9_7f4a_7c15 ^ u64::from(std::process::id());
    for v in &variants {
        // Warm-up: the session's caches, and past the first five custom plans.
        for _ in 0..20 {
            run_once(v, n, &mut rng).await;
        }
    }
    for round in 0..rounds {
        for i in 0..variants.len() {
            let at = (round + i) % variants.len();
            let v = &variants[at];
            tokio::time::sleep(Duration::from_millis(500)).await;
            let (cpu0, start) = (pg_cpu(port), Instant::now());
            assert!(cpu0 > 0.0, "no Postgres started with port {port} here");
            let mut statements = 0u64;
            let mut records = 0u64;
            while start.elapsed() < Duration::from_secs(secs) {
                // `--spread`: sizes from 1 to 2N - 1 (mean N), as the writer's rounds vary.
                let size = if spread {
                    1 + (next(&mut rng) % (2 * n as u64 - 1)) as usize
                } else {
                    n
                };
                run_once(v, size, &mut rng).await;
                statements += 1;
                records += size as u64;
            }
            let cpu = pg_cpu(port) - cpu0;
            let per_record = cpu * 1e6 / records as f64;
            let per_statement = cpu * 1e6 / statements as f64;
            println!(
                "round {round:>2} {:>10}: {statements:>6} statements, Postgres {per_record:6.1} µs per record, {per_statement:7.1} per statement",
                v.label,
            );
            variants[at].per_record.push(per_record);
            variants[at].per_statement.push(per_statement);
        }
    }
    println!("medians over {rounds} rounds of {secs} s, {n} records per statement:");
    for v in &variants {
        println!(
            "{:>10}: Postgres {:6.1} µs per record, {:7.1} per statement",
            v.label,
            median(v.per_record.clone()),
            median(v.per_statement.clone())
        );
    }
}
