//! The `rstar` command line: one module per subcommand, dispatched from [`main`].
//!
//! Each subcommand module exposes a clap `Args` struct and a `run(args)`
//! function returning `anyhow::Result<()>`; this file only wires them together,
//! so adding a subcommand is one enum variant and one match arm.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod info;

/// rStar2-Agent in Rust: train and evaluate LLM agents that reason with a Python tool.
#[derive(Debug, Parser)]
#[command(name = "rstar", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// Log level filter (also read from RUST_LOG), e.g. `info` or `rstar_toolenv=debug`.
    #[arg(long, global = true, default_value = "warn", env = "RSTAR_LOG")]
    pub log: String,

    /// The subcommand to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Every `rstar` subcommand.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the version, the workspace crates built in and the enabled features.
    Info(info::Args),
}

/// Parses the process arguments, runs the chosen subcommand and maps errors to
/// a non-zero exit code with the whole error chain on stderr.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(&cli.log);
    let result = match cli.command {
        Command::Info(args) => info::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter));
    // A second initialisation (tests calling `main` twice) is harmless.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
