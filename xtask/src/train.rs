//! `cargo xtask train`: the main job, the rStar2-Agent recipe end to end.
//!
//! Runs `cargo run --release -p rstar-cli --bin rstar -- train ARGS`: SFT on the embedded
//! default, then the staged GRPO-RoC curriculum, with held-out evaluations and a final table.
//! With no arguments it runs the `tiny` preset; `--preset smoke --out DIR` is the CI check.
//! `cargo xtask eval ARGS` runs `rstar eval ARGS` the same way.

use anyhow::Result;

use crate::util::{cargo, step};

pub fn run(args: &[String]) -> Result<()> {
    rstar("train", args)
}

/// `cargo xtask eval ARGS`: `rstar eval ARGS` in release mode with the project's Python.
pub fn eval(args: &[String]) -> Result<()> {
    rstar("eval", args)
}

fn rstar(subcommand: &str, args: &[String]) -> Result<()> {
    // The tool sandbox runs the policy's code with the project's Python (numpy and sympy present).
    let python = crate::venv::ensure_train()?;
    let mut cmd = cargo();
    cmd.env("RSTAR_PYTHON", python);
    cmd.args([
        "run",
        "--release",
        "-p",
        "rstar-cli",
        "--bin",
        "rstar",
        "--",
        subcommand,
    ]);
    cmd.args(args);
    step(&format!("rstar {subcommand}"), &mut cmd)
}
