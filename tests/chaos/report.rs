//! One table row per scenario: printed, and appended to a file that `make chaos`
//! prints as the full table at the end.

use std::io::Write;
use std::path::PathBuf;

use crate::checker::Report;

pub const HEADER: &str =
    "| scenario | requests | executions | duplicates | lost | verdict | notes |\n\
                          |---|---:|---:|---:|---:|---|---|";

/// `CHAOS_REPORT`, or `target/tmp/chaos-report.md`.
pub fn path() -> PathBuf {
    std::env::var_os("CHAOS_REPORT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("chaos-report.md"))
}

pub fn row(r: &Report, seconds: f64) -> String {
    let mut notes = r.notes.join("; ");
    if !notes.is_empty() {
        notes.push_str("; ");
    }
    notes.push_str(&format!("{seconds:.0}s"));
    format!(
        "| {} | {} | {} | {} | {} | {} | {} |",
        r.scenario,
        r.requests,
        r.executions,
        r.duplicates,
        r.lost,
        r.verdict(),
        notes.replace('|', "/")
    )
}

/// Prints the row and its evidence, and appends the row to the report file.
pub fn emit(r: &Report, seconds: f64) {
    let row = row(r, seconds);
    println!("\n{HEADER}\n{row}");
    for v in &r.violations {
        println!("  FAIL: {v}");
    }
    for m in &r.measured {
        println!("  MEASURED: {m}");
    }
    for d in &r.details {
        println!("  {d}");
    }
    let path = path();
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
    {
        let _ = writeln!(f, "{row}");
    }
}
