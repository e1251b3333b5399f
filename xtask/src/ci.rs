//! `cargo xtask ci`: everything CI checks, in the order that fails fastest.
//!
//! 1. the Python virtualenv the tests need (created when missing);
//! 2. tidy: every `.rs` file opens with a `//!` line;
//! 3. `cargo fmt --check`;
//! 4. `cargo clippy --workspace --all-targets` with warnings denied;
//! 5. `cargo test --workspace`, doctests included, with `RSTAR_PYTHON` set (headless Chromium
//!    for the run-report test is installed with apt-get first when absent);
//! 6. the policy's `wgpu` tests and a `rstar train --backend wgpu` smoke run on Mesa's
//!    lavapipe (CPU Vulkan; installed with apt-get when absent), which is the slowest step: a
//!    second Burn build with the GPU backend.

use std::path::Path;
use std::time::Instant;

use anyhow::{Result, bail};

use crate::util::{cargo, root, step};
use crate::venv;

fn run_ci() -> Result<()> {
    let start = Instant::now();
    let python = venv::ensure()?;
    tidy()?;
    step("rustfmt", cargo().args(["fmt", "--all", "--", "--check"]))?;
    step(
        "clippy",
        cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    crate::chromium::ensure()?;
    step(
        "tests",
        cargo()
            .args(["test", "--workspace", "--locked"])
            .env("RSTAR_PYTHON", &python)
            .env("RUST_BACKTRACE", "1"),
    )?;
    crate::wgpu::test_on_lavapipe()?;
    eprintln!(
        "==> ci: all checks passed in {:.0}s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

pub fn run(args: &[String]) -> Result<()> {
    if let Some(extra) = args.first() {
        bail!("`cargo xtask ci` takes no arguments (got `{extra}`)");
    }
    run_ci()
}

/// Every Rust source file must open with a `//!` line saying what it is.
fn tidy() -> Result<()> {
    let root = root();
    let mut bad = Vec::new();
    for dir in ["crates", "xtask", "examples"] {
        walk(&root.join(dir), &mut bad)?;
    }
    if !bad.is_empty() {
        for path in &bad {
            eprintln!(
                "tidy: {} does not start with a `//!` line",
                path.strip_prefix(&root).unwrap_or(path).display()
            );
        }
        bail!("tidy: {} file(s) lack a `//!` header", bad.len());
    }
    eprintln!("==> tidy: ok");
    Ok(())
}

fn walk(dir: &Path, bad: &mut Vec<std::path::PathBuf>) -> Result<()> {
    if !dir.is_dir() {
        return Ok(());
    }
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                walk(&path, bad)?;
            }
        } else if name.ends_with(".rs") {
            let text = std::fs::read_to_string(&path)?;
            if !text.starts_with("//!") {
                bad.push(path);
            }
        }
    }
    Ok(())
}
