//! The `cargo xtask` command: `config-reference [--out FILE]`, `module-map [--out FILE]`.
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask config-reference|module-map [--out FILE]

  config-reference   write the configuration reference (docs/configuration.md),
                     generated from the doc comments of src/config/
  module-map         write the map of the code file by file (docs/modules.md), from
                     the first sentence of each file's `//!` comment

  Each writes to standard output, or to FILE with --out (`make docs` writes the
  committed ones)";

/// What the command line asks for.
enum Task {
    Help,
    ConfigReference { out: Option<PathBuf> },
    ModuleMap { out: Option<PathBuf> },
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Task, String> {
    let task = match args.next().as_deref() {
        None | Some("-h" | "--help" | "help") => return Ok(Task::Help),
        Some(name @ ("config-reference" | "module-map")) => {
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
            if name == "module-map" {
                Task::ModuleMap { out }
            } else {
                Task::ConfigReference { out }
            }
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
        Task::ConfigReference { out } => {
            let text = xtask::reference::render()
                .map_err(|e| format!("the configuration reference cannot be generated: {e}"));
            write(text, out)
        }
        Task::ModuleMap { out } => {
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let text = xtask::module_map::render(&root)
                .map_err(|e| format!("the module map cannot be generated: {e}"));
            write(text, out)
        }
    }
}

/// `text` to `out`, or to standard output.
fn write(text: Result<String, String>, out: Option<PathBuf>) -> ExitCode {
    let text = match text {
        Ok(text) => text,
        Err(e) => {
            eprintln!("xtask: {e}");
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
