//! `cargo xtask wheel`: builds the `rstar_agent` Python wheel (crates/python) with maturin and installs it into target/venv.
//!
//! The wheel is one abi3 file for CPython 3.9 and later, written to `target/wheels/`. maturin
//! builds in its own target folder, `target/wheel`, so that a wheel build and the workspace's
//! build never wait on each other's lock; the release profile is the one users get.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::util::{root, step};
use crate::venv;

/// The wheel's distribution name as it appears in the file name.
const DIST: &str = "rstar_agent";

pub fn run(args: &[String]) -> Result<()> {
    let install = match args.first().map(String::as_str) {
        None => true,
        Some("--no-install") => false,
        Some(other) => bail!("`cargo xtask wheel` takes only --no-install (got `{other}`)"),
    };
    let python = venv::ensure()?;
    let wheel = build(&python)?;
    if install {
        self::install(&python, &wheel)?;
        println!("{} (installed into {})", wheel.display(), python.display());
    } else {
        println!("{}", wheel.display());
    }
    Ok(())
}

/// Builds the wheel with the virtualenv's maturin and returns its path.
pub fn build(python: &Path) -> Result<PathBuf> {
    let root = root();
    let out = root.join("target").join("wheels");
    // Old wheels would make the newest one ambiguous.
    if let Ok(entries) = std::fs::read_dir(&out) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(DIST) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    let maturin = python.with_file_name("maturin");
    if !maturin.is_file() {
        bail!(
            "{} is missing: xtask/requirements.txt lists maturin (`cargo xtask venv`)",
            maturin.display()
        );
    }
    step(
        "build the rstar_agent wheel (maturin, release)",
        Command::new(&maturin)
            .current_dir(&root)
            .args([
                "build",
                "--release",
                "--manifest-path",
                "crates/python/Cargo.toml",
            ])
            .arg("--out")
            .arg(&out)
            .arg("--interpreter")
            .arg(python)
            .env("CARGO_TARGET_DIR", root.join("target").join("wheel")),
    )?;
    let wheel = std::fs::read_dir(&out)
        .with_context(|| format!("reading {}", out.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name().is_some_and(|n| {
                let n = n.to_string_lossy();
                n.starts_with(DIST) && n.ends_with(".whl")
            })
        })
        .with_context(|| format!("maturin wrote no {DIST} wheel into {}", out.display()))?;
    Ok(wheel)
}

/// Installs `wheel` into the virtualenv of `python`, replacing an earlier build.
pub fn install(python: &Path, wheel: &Path) -> Result<()> {
    step(
        "install the wheel into target/venv",
        venv::pip_install(python)
            .args(["--force-reinstall", "--no-deps"])
            .arg(wheel),
    )
}

/// Runs the wheel's pytest suite (crates/python/tests) with `python`; `rstar` is the binary the
/// agreement tests compare with. pytest's exit status 5 (no test collected) fails like any other.
pub fn pytest(python: &Path, rstar: &Path) -> Result<()> {
    step(
        "the wheel's Python tests (pytest crates/python/tests)",
        Command::new(python)
            .current_dir(root())
            .args([
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-q",
                "-ra",
                "crates/python/tests",
            ])
            .env("RSTAR_BIN", rstar)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
    )
}
