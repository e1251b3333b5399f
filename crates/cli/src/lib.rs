//! The `rstar` command line: one module per subcommand, dispatched from [`main`].
//!
//! Each subcommand module exposes a clap `Args` struct and a `run(args)`
//! function returning `anyhow::Result<()>`; this file only wires them together,
//! so adding a subcommand is one enum variant and one match arm.
//!
//! This crate is the workspace's edge: clap, anyhow, indicatif and tracing-subscriber are
//! dependencies of it and of no library crate, and the Burn backend is chosen here
//! (`--backend flex|wgpu|cuda` on `train`, `eval` and `serve`; features `flex` (default),
//! `wgpu`, `cuda`). It is **not** a library to build on: use `rstar-agent` and the crates under
//! it. The `rstar` binary is `src/main.rs`, a one-line shell over [`main`].
//!
//! # Crate features
//! - `flex` (default): Burn's pure-Rust CPU backend.
//! - `wgpu`, `cuda`, `tch`: the GPU backends (`tch` is LibTorch and needs one; not built in CI).
//! - `fusion`, `autotune`: CubeCL kernel fusion and persisted autotuning for `wgpu`/`cuda`.
//!
//! Each forwards to `rstar-agent`, and through it to `rstar-policy`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod analyze;
pub mod backend;
mod bench;
mod compare;
mod curriculum;
mod eval;
mod info;
mod lora;
mod report;
mod roc;
mod serve;
mod sft;
mod show;
mod simulate;
mod tasks;
mod tools;
mod tools_serve;
mod train;
mod verify;
mod verify_serve;

/// rStar2-Agent in Rust: train and evaluate LLM agents that reason with a Python tool.
#[derive(Debug, Parser)]
#[command(name = "rstar", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// Log level filter (also read from RUST_LOG), e.g. `info` or `rstar_agent::toolenv=debug`.
    #[arg(long, global = true, default_value = "warn", env = "RSTAR_LOG")]
    pub log: String,

    /// The subcommand to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Every `rstar` subcommand.
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // reason: parsed once per process; boxing `train`'s flags buys nothing
pub enum Command {
    /// Print the version, the workspace crates built in and the enabled features.
    Info(info::Args),
    /// Score JSONL responses against integer, math or multiple-choice answers (--mode; one JSON verdict a line, summary on stderr).
    Verify(verify::Args),
    /// Down-sample JSONL rollout groups with Resample-on-Correct (kept lines on stdout, metrics on stderr).
    Roc(roc::Args),
    /// Show a staged curriculum (`show`) or write a dataset's hard problems from rollouts (`filter`).
    Curriculum(curriculum::Args),
    /// The sandboxed Python pool: run JSONL calls (`run`), report isolation (`doctor`), serve HTTP (`serve`).
    Tools(tools::Args),
    /// Print one rollout of a trajectory JSONL: turns, tool calls and results coloured, stop reason, reward.
    Show(show::Args),
    /// Analyse trajectories: `entropy` splits high-entropy tokens into reasoning, after-tool and code.
    Analyze(analyze::Args),
    /// Serve a model over the OpenAI-compatible API (/v1/completions, /v1/chat/completions).
    Serve(serve::Args),
    /// Simulate rollout dispatch (static, least-requests, kv-aware) on a cluster preset.
    Simulate(simulate::Args),
    /// Evaluate a model directory or server on a dataset: avg@k, pass@k, tool statistics (results, trajectories, summary).
    Eval(eval::Args),
    /// Write problems of the embedded task set (train, held-out or held-out-kinds split) as dataset JSONL.
    Tasks(tasks::Args),
    /// Fine-tune a model directory on conversation datasets (the paper's non-reasoning SFT): `<out>/model`.
    #[command(
        override_usage = "rstar sft --model <DIR> --sft-data <FILE[:W]>... [OPTIONS]\n       rstar sft --resume <RUN_DIR> [OPTIONS]"
    )]
    Sft(sft::Args),
    /// Train the embedded default: SFT, then staged GRPO-RoC, with held-out evaluations (`runs/<name>/`).
    Train(train::Args),
    /// Write a run's self-contained HTML report (config, evaluations, plots, trajectories; two runs: compared).
    Report(report::Args),
    /// LoRA adapters in PEFT's layout: `merge` folds one into its base as a plain HF directory.
    Lora(lora::Args),
    /// Measure against the peer stack: `policy` runs prefill, decode and a training step beside PyTorch on the same weights.
    Bench(bench::Args),
}

/// Parses the process arguments, runs the chosen subcommand and maps errors to
/// a non-zero exit code with the whole error chain on stderr.
pub fn main() -> ExitCode {
    quiet_broken_pipe_panics();
    let cli = Cli::parse();
    init_tracing(&cli.log);
    let result = match cli.command {
        Command::Info(args) => info::run(args),
        Command::Verify(args) => verify::run(args),
        Command::Roc(args) => roc::run(args),
        Command::Curriculum(args) => curriculum::run(args),
        Command::Tools(args) => tools::run(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Show(args) => show::run(args),
        Command::Analyze(args) => analyze::run(args),
        Command::Sft(args) => sft::run(args),
        Command::Train(args) => train::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Tasks(args) => tasks::run(args),
        Command::Report(args) => report::run(args),
        Command::Lora(args) => lora::run(args),
        Command::Bench(args) => bench::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader closed the pipe (`rstar tasks | head -1`): it has what it wanted.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", error_message(&err));
            ExitCode::FAILURE
        }
    }
}

/// Whether an error comes from writing to a pipe its reader closed: the command then ends
/// quietly with status 0, as `seq` and `cat` do when `head` has read enough.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `println!` panics when its pipe is closed (`failed printing to stdout: Broken pipe`): such a
/// panic ends the process quietly with status 0 instead of a backtrace; every other panic is
/// reported as before.
fn quiet_broken_pipe_panics() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.contains("Broken pipe") {
            std::process::exit(0);
        }
        report(info);
    }));
}

/// What one client may hold on `rstar serve` and `rstar tools serve`
/// (`rstar_agent::toolserver::http::ConnectionLimits`).
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionArgs {
    /// Connections open at once; one more is answered 503 and closed [default: 4096, or half
    /// the process's open-file limit when that is lower].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,
    /// Seconds a connection waiting for a request head may go without a byte (also the idle
    /// keep-alive limit); after them a head must keep up with --body-min-rate.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub header_timeout: f64,
    /// Seconds a request body may go without a byte arriving; a body that keeps arriving at
    /// --body-min-rate is never cut off, however long it takes (a weight upload).
    #[arg(long, value_name = "SECS", default_value_t = 15.0)]
    pub body_timeout: f64,
    /// The slowest a request body may arrive, in bytes a second, after its first
    /// --body-timeout seconds, and a request head after its first --header-timeout (0: only
    /// the timeouts without progress).
    #[arg(long, value_name = "BYTES", default_value_t = 1024)]
    pub body_min_rate: u64,
}

impl ConnectionArgs {
    /// The limits, after checking the flags.
    ///
    /// # Errors
    /// A flag that is zero, negative or not a number, named.
    pub fn limits(&self) -> anyhow::Result<rstar_agent::toolserver::http::ConnectionLimits> {
        anyhow::ensure!(
            self.max_connections != Some(0),
            "--max-connections must be at least 1"
        );
        for (flag, secs) in [
            ("--header-timeout", self.header_timeout),
            ("--body-timeout", self.body_timeout),
        ] {
            anyhow::ensure!(
                secs.is_finite() && secs > 0.0 && secs < 1e9,
                "{flag} must be a positive number of seconds, got {secs}"
            );
        }
        let defaults = rstar_agent::toolserver::http::ConnectionLimits::new();
        Ok(rstar_agent::toolserver::http::ConnectionLimits {
            max_connections: self.max_connections.unwrap_or(defaults.max_connections),
            header_timeout: std::time::Duration::from_secs_f64(self.header_timeout),
            body_timeout: std::time::Duration::from_secs_f64(self.body_timeout),
            body_min_rate: self.body_min_rate,
        })
    }
}

/// The modules the paper's Python tool is written against: model code imports them.
pub(crate) const TOOL_MODULES: [&str; 2] = ["numpy", "sympy"];

/// Runs one call in the sandbox that imports [`TOOL_MODULES`], so that an interpreter without
/// them stops the command before any rollout (every `import numpy` would fail inside the
/// rollouts, scored as the model's error), naming the module and `RSTAR_PYTHON`.
pub(crate) fn check_sandbox_modules(
    pool: &rstar_agent::toolenv::BlockingPool,
    python: &std::path::Path,
) -> anyhow::Result<()> {
    let code = TOOL_MODULES
        .iter()
        .map(|m| format!("import {m}\n"))
        .collect::<String>();
    let result = pool.run(rstar_agent::toolenv::ToolCall::python(code, String::new()));
    if result.success() {
        return Ok(());
    }
    let missing: Vec<&str> = TOOL_MODULES
        .iter()
        .copied()
        .filter(|m| result.stderr.contains(&format!("'{m}'")))
        .collect();
    let what = if missing.is_empty() {
        format!(
            "{} (stderr: {})",
            TOOL_MODULES.join(" and "),
            result.stderr.trim()
        )
    } else {
        missing.join(" and ")
    };
    anyhow::bail!(
        "the sandbox's Python ({}) cannot import {what}, which model code imports: set RSTAR_PYTHON or --python to an interpreter that has numpy and sympy (`cargo xtask venv` makes target/venv/bin/python), or pass --allow-missing-preload to go on without them",
        python.display()
    )
}

/// A hint for a `--model` that is a run directory (`runs/tiny`) rather than a model in it: which
/// checkpoint to give instead; empty otherwise.
pub(crate) fn run_dir_hint(dir: &std::path::Path) -> String {
    let checkpoints = dir.join("checkpoints");
    if dir.join("config.json").is_file() && checkpoints.is_dir() {
        let pick = ["final", "last", "sft"]
            .iter()
            .map(|c| checkpoints.join(c))
            .find(|c| c.is_dir())
            .unwrap_or(checkpoints);
        format!(
            " (a training run's directory, not a model: give one of its checkpoints, e.g. {})",
            pick.display()
        )
    } else {
        String::new()
    }
}

/// The chat layout a checkpoint was trained with when the command is not told one
/// (`rstar eval`, `rstar serve`): the compact layout for the character tokenizer (the embedded
/// default's), ChatML for every other.
pub(crate) fn default_template(
    tokenizer: &rstar_agent::policy::Tokenizer,
) -> rstar_agent::template::TemplateFormat {
    match tokenizer {
        rstar_agent::policy::Tokenizer::Char(_) => rstar_agent::template::TemplateFormat::Compact,
        _ => rstar_agent::template::TemplateFormat::ChatMl,
    }
}

/// An error and its causes joined by `: `, each cause once: many errors already end with
/// their source's message (thiserror's `"grpo: {0}"` over a `#[from]`), and anyhow's `{:#}`
/// would print it again.
pub fn error_message(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        match parts.last_mut() {
            Some(last) if last.contains(&text) => {}
            // A cause that says all its context said and more replaces it.
            Some(last) if text.contains(last.as_str()) => *last = text,
            _ => parts.push(text),
        }
    }
    parts.join(": ")
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

/// Waits for SIGINT (Ctrl-C) or SIGTERM: how the serving subcommands know to shut down.
pub(crate) async fn wait_for_signal() -> anyhow::Result<()> {
    use anyhow::Context;
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for SIGINT")?,
        _ = term.recv() => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("grpo: {0}")]
    struct Outer(#[from] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("invalid config field `clip_ratio_low`: must be in [0, 1), got 5")]
    struct Inner;

    #[test]
    fn issue_42_an_error_message_names_each_cause_once() {
        let err = anyhow::Error::from(Outer(Inner));
        // anyhow's own chain repeats the cause the outer message already holds.
        assert_eq!(format!("{err:#}").matches("got 5").count(), 2);
        assert_eq!(
            error_message(&err),
            "grpo: invalid config field `clip_ratio_low`: must be in [0, 1), got 5"
        );
        // Context that says something else is kept, in order.
        let err = anyhow::Error::from(Outer(Inner)).context("reading smoke.json");
        assert_eq!(
            error_message(&err),
            "reading smoke.json: grpo: invalid config field `clip_ratio_low`: must be in [0, 1), got 5"
        );
        // A cause that repeats its context and adds to it replaces it.
        let err =
            anyhow::anyhow!("must be in [0, 1), got 5").context("must be in [0, 1), got 5: more");
        assert_eq!(error_message(&err), "must be in [0, 1), got 5: more");
    }
}
