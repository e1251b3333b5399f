//! `cargo xtask ci`: everything CI checks, in the order that fails fastest.
//!
//! 1. the Python virtualenv the tests need (created when missing);
//! 2. (tidy: the structural invariants are tests, `xtask/tests/tidy.rs`, run in step 5);
//! 3. `cargo fmt --check`;
//! 4. `cargo clippy --workspace --all-targets` with warnings denied;
//! 5. `cargo test --workspace --features rstar-policy/wgpu,rstar-cli/wgpu`, doctests included,
//!    with `RSTAR_PYTHON` set: one build for every test, so the policy's `wgpu` tests and the
//!    `rstar train --backend wgpu` smoke run (on Mesa's lavapipe, a Vulkan driver on the CPU)
//!    run with the others instead of after a second Burn build. Headless Chromium for the
//!    run-report test and lavapipe are installed with apt-get first when absent;
//! 6. the docs' snippets in a scratch project with path dependencies (`cargo xtask doc-snippets`).

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
    crate::wgpu::ensure_vulkan_driver()?;
    // One build for every test, the `wgpu` ones included: a separate `--features wgpu` build
    // afterwards rebuilt Burn and everything above it (the policy, the umbrella, the CLI and
    // every test binary that links them) a second time.
    step(
        "tests (the wgpu ones on Mesa's lavapipe)",
        cargo()
            .args([
                "test",
                "--workspace",
                "--locked",
                "--features",
                crate::wgpu::FEATURES,
            ])
            .env("RSTAR_PYTHON", &python)
            .env("RUST_BACKTRACE", "1")
            .env("CUBECL_AUTOTUNE_LEVEL", "minimal"),
    )?;
    crate::snippets::run(&[])?;
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
