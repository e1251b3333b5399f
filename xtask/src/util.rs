//! Small helpers shared by the xtask commands: paths and running child processes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace root")
        .to_path_buf()
}

/// A `cargo` command run from the workspace root, using the same cargo that runs xtask.
pub fn cargo() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root());
    cmd
}

/// Builds the release `rstar` binary and returns its path (under `CARGO_TARGET_DIR` when set).
pub fn release_rstar() -> Result<PathBuf> {
    step(
        "build rstar (release)",
        cargo().args(["build", "--release", "-p", "rstar-cli", "--bin", "rstar"]),
    )?;
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from);
    Ok(target.join("release").join("rstar"))
}

/// Runs a command to completion, echoing it first and timing it; fails on a non-zero exit.
pub fn step(label: &str, cmd: &mut Command) -> Result<()> {
    eprintln!("==> {label}: {cmd:?}");
    let start = Instant::now();
    let status = cmd
        .status()
        .with_context(|| format!("could not start {label}"))?;
    let secs = start.elapsed().as_secs_f64();
    if !status.success() {
        bail!("{label} failed ({status}) after {secs:.0}s");
    }
    eprintln!("==> {label}: ok in {secs:.0}s");
    Ok(())
}
