//! `cargo xtask ci`: everything CI checks, in the order that fails fastest.
//!
//! 1. the Python virtualenv the tests need (created when missing);
//! 2. (tidy: the structural invariants are tests, `xtask/tests/tidy.rs`, run in step 5);
//! 3. `cargo fmt --check`;
//! 4. clippy with warnings denied, on every target (libraries, binaries, tests, examples,
//!    benches), as part of the test build: `cargo test --workspace --no-run --features
//!    rstar-policy/wgpu,rstar-cli/wgpu`, then the same with `--benches`, with clippy's driver as
//!    the workspace's compiler wrapper, which is what `cargo clippy` does on top of `cargo check`.
//!    The dependencies are then compiled once, in full, instead of a second time as metadata
//!    for a separate `cargo clippy` (311 s cold on a 2-core machine, about a fifth of a cold
//!    CI run), and the code behind the `wgpu` features is linted too;
//! 5. `rstar tools doctor`, so CI's output says which sandbox layers were active (it fails if a
//!    probe escapes), then `cargo test --workspace` with the same features and wrapper (so nothing is rebuilt),
//!    doctests included, with `RSTAR_PYTHON` set: one build for every test, so the policy's
//!    `wgpu` tests and the `rstar train --backend wgpu` smoke run (on Mesa's lavapipe, a Vulkan
//!    driver on the CPU) run with the others instead of after a second Burn build. Headless
//!    Chromium for the run-report test and lavapipe are installed with apt-get first when absent;
//! 6. the Python wheel (`cargo xtask wheel`: maturin, release, into `target/venv`) and its pytest
//!    suite, `crates/python/tests`, which compares it with the `rstar` binary step 5 built;
//! 7. the docs' snippets in a scratch project with path dependencies (`cargo xtask doc-snippets`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::util::{cargo, root, step};
use crate::venv;

/// The toolchain's `clippy-driver`, the compiler wrapper that `cargo clippy` uses.
fn clippy_driver() -> Result<PathBuf> {
    let out = Command::new("rustc")
        .current_dir(root())
        .args(["--print", "sysroot"])
        .output()
        .context("could not run `rustc --print sysroot`")?;
    if !out.status.success() {
        bail!(
            "`rustc --print sysroot` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let sysroot = String::from_utf8(out.stdout).context("the sysroot is not UTF-8")?;
    let driver = PathBuf::from(sysroot.trim()).join("bin/clippy-driver");
    if !driver.is_file() {
        bail!(
            "no clippy in this toolchain ({} is missing): `rustup component add clippy`",
            driver.display()
        );
    }
    Ok(driver)
}

/// A `cargo test` with the CI features and clippy (warnings denied) as the workspace's
/// compiler wrapper: `cargo clippy`'s own mechanism (`RUSTC_WORKSPACE_WRAPPER`, and its
/// arguments in `CLIPPY_ARGS`, separated by `__CLIPPY_HACKERY__`), on a full build.
fn linted_test(driver: &Path) -> Command {
    let mut cmd = cargo();
    cmd.args([
        "test",
        "--workspace",
        "--locked",
        "--features",
        crate::wgpu::FEATURES,
    ])
    .env("RUSTC_WORKSPACE_WRAPPER", driver)
    .env(
        "CLIPPY_ARGS",
        "-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__",
    );
    // No incremental state: CI builds once from a clean checkout and never reuses it, and
    // it is gigabytes (a run on 2026-12-07 filled CI's disk while compiling). A caller who
    // sets `CARGO_INCREMENTAL` keeps their choice.
    if std::env::var_os("CARGO_INCREMENTAL").is_none() {
        cmd.env("CARGO_INCREMENTAL", "0");
    }
    cmd
}

fn run_ci() -> Result<()> {
    let start = Instant::now();
    let python = venv::ensure()?;
    step("rustfmt", cargo().args(["fmt", "--all", "--", "--check"]))?;
    let driver = clippy_driver()?;
    crate::chromium::ensure()?;
    crate::wgpu::ensure_vulkan_driver()?;
    // One build serves clippy and every test, the `wgpu` ones included. A separate `cargo
    // clippy` compiled every dependency a second time (as metadata, with other features), and
    // a separate `--features wgpu` test build rebuilt Burn and everything above it.
    // `--no-run` builds what the test run needs (libraries, binaries, tests, examples);
    // `--benches` adds the benchmarks, in test mode. (`--all-targets` would also build every
    // example a second time, as a test, beside the plain build the test run wants.)
    step(
        "clippy (warnings denied) and the test build",
        linted_test(&driver).arg("--no-run"),
    )?;
    step(
        "clippy (warnings denied) on the benchmarks",
        linted_test(&driver).args(["--benches", "--no-run"]),
    )?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| crate::util::root().join("target"), PathBuf::from);
    let rstar = target.join("debug").join("rstar");
    // Which sandbox layers this machine gives the tool environment (the adversarial tests
    // check the bound of each layer's mode, active or degraded); fails if a probe escapes.
    step(
        "sandbox layers here (rstar tools doctor)",
        Command::new(&rstar)
            .args(["tools", "doctor", "--workers", "1", "--preload", "numpy"])
            .env("RSTAR_PYTHON", &python),
    )?;
    step(
        "tests (the wgpu ones on Mesa's lavapipe)",
        linted_test(&driver)
            .env("RSTAR_PYTHON", &python)
            .env("RUST_BACKTRACE", "1")
            .env("CUBECL_AUTOTUNE_LEVEL", "minimal"),
    )?;
    let wheel = crate::wheel::build(&python)?;
    crate::wheel::install(&python, &wheel)?;
    crate::wheel::pytest(&python, &rstar)?;
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
