//! `cargo xtask ci`: everything CI checks, in the order that fails fastest.
//!
//! 1. the Python virtualenv the tests need (created when missing);
//! 2. (tidy: the structural invariants are tests, `xtask/tests/tidy.rs`, run in step 5);
//! 3. `cargo fmt --check`;
//! 4. `cargo clippy --workspace --all-targets` with warnings denied;
//! 5. `cargo test --workspace`, doctests included, with `RSTAR_PYTHON` set (headless Chromium
//!    for the run-report test is installed with apt-get first when absent);
//! 6. the docs' snippets in a scratch project with path dependencies (`cargo xtask doc-snippets`);
//! 7. the policy's `wgpu` tests and a `rstar train --backend wgpu` smoke run on Mesa's
//!    lavapipe (CPU Vulkan; installed with apt-get when absent), which is the slowest step: a
//!    second Burn build with the GPU backend.

use std::time::Instant;

use anyhow::{Result, bail};

use crate::util::{cargo, step};
use crate::venv;

fn run_ci() -> Result<()> {
    let start = Instant::now();
    let python = venv::ensure()?;
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
    crate::snippets::run(&[])?;
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
