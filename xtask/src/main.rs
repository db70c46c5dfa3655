//! The `cargo xtask` command: `config-reference [--out FILE]`.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask config-reference [--out FILE]

  config-reference   write the configuration reference (docs/configuration.md),
                     generated from the doc comments of src/config/; to standard
                     output, or to FILE with --out (`make docs` writes the committed one)";

/// What the command line asks for.
enum Task {
    Help,
    ConfigReference { out: Option<PathBuf> },
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Task, String> {
    let task = match args.next().as_deref() {
        None | Some("-h" | "--help" | "help") => return Ok(Task::Help),
        Some("config-reference") => {
            let mut out = None;
            while let Some(arg) = args.next() {
                match arg.as_str() {
                    "--out" => match args.next() {
                        Some(file) => out = Some(PathBuf::from(file)),
                        None => return Err("--out needs a file".into()),
                    },
                    "-h" | "--help" => return Ok(Task::Help),
                    other => return Err(format!("unexpected argument `{other}`")),
                }
            }
            Task::ConfigReference { out }
        }
        Some(other) => return Err(format!("unknown task `{other}`")),
    };
    Ok(task)
}

fn main() -> ExitCode {
    let task = match parse(std::env::args().skip(1)) {
        Ok(task) => task,
        Err(e) => {
            eprintln!("xtask: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match task {
        Task::Help => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Task::ConfigReference { out } => config_reference(out),
    }
}

/// The reference to `out`, or to standard output.
fn config_reference(out: Option<PathBuf>) -> ExitCode {
    let text = match xtask::reference::render() {
        Ok(text) => text,
        Err(e) => {
            eprintln!("xtask: the configuration reference cannot be generated: {e}");
            return ExitCode::FAILURE;
        }
    };
    match out {
        Some(path) => {
            if let Err(e) = std::fs::write(&path, text) {
                eprintln!("xtask: cannot write {}: {e}", path.display());
                return ExitCode::FAILURE;
            }
        }
        None => print!("{text}"),
    }
    ExitCode::SUCCESS
}
