//! `cargo xtask test-wgpu`: the policy's wgpu-vs-flex test and a `rstar train --backend wgpu`
//! smoke run on Mesa's lavapipe.
//!
//! Lavapipe is a Vulkan driver that runs on the CPU, so the `wgpu` backend can
//! be tested on machines without a GPU. It is slow (a clean `wgpu` build takes
//! over half an hour on two cores and the first step compiles kernels for a
//! minute or two; measured: 57 minutes for the test build on a 2-core machine
//! loaded by other builds, 12 s for the test itself). `cargo xtask ci` builds the
//! feature into its one test build and runs these tests with the others; this
//! command runs them alone.

use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::util::{cargo, step};

pub fn run(args: &[String]) -> Result<()> {
    if let Some(extra) = args.first() {
        bail!("`cargo xtask test-wgpu` takes no arguments (got `{extra}`)");
    }
    test_on_lavapipe()
}

/// The features that build the `wgpu` backend into the policy and the CLI.
pub const FEATURES: &str = "rstar-policy/wgpu,rstar-cli/wgpu";

/// Installs lavapipe when absent and runs every `wgpu` test of the policy (its examples are
/// compiled with the feature too; the bench is not a test and would run in full), then the
/// trainer's `--backend wgpu` smoke run.
/// (`cargo xtask ci` runs the same tests within its one test build.)
pub fn test_on_lavapipe() -> Result<()> {
    ensure_vulkan_driver()?;
    // One cargo invocation over the whole workspace: features unify as in `cargo test
    // --workspace`, so only the GPU stack and what depends on it is built again (selecting the
    // two packages with `-p` unified fewer features and rebuilt every dependency, serde and
    // tokio included: 44 minutes on a slow day). The filter runs only the `wgpu` tests.
    step(
        "wgpu tests: the policy vs flex, `rstar train --backend wgpu` (lavapipe)",
        cargo()
            .args([
                "test",
                "--workspace",
                "--features",
                FEATURES,
                "--lib",
                "--tests",
                "--examples",
                "--locked",
                "wgpu",
            ])
            .env("RSTAR_PYTHON", crate::venv::ensure()?)
            // Kernel autotuning on a CPU driver costs minutes and gains nothing.
            .env("CUBECL_AUTOTUNE_LEVEL", "minimal"),
    )
}

/// Installs Mesa's Vulkan drivers (lavapipe) and the Vulkan loader when absent.
pub fn ensure_vulkan_driver() -> Result<()> {
    let have_loader = std::path::Path::new("/usr/lib/x86_64-linux-gnu/libvulkan.so.1").exists()
        || std::path::Path::new("/usr/lib/aarch64-linux-gnu/libvulkan.so.1").exists();
    let have_icd = std::fs::read_dir("/usr/share/vulkan/icd.d")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .any(|e| e.file_name().to_string_lossy().starts_with("lvp_icd"))
        })
        .unwrap_or(false);
    if have_loader && have_icd {
        return Ok(());
    }
    eprintln!("==> installing the Vulkan loader and Mesa's lavapipe driver (Debian packages)");
    step("apt-get update", Command::new("apt-get").arg("update")).context(
        "apt-get is needed to install mesa-vulkan-drivers (run as root on Debian/Ubuntu)",
    )?;
    step(
        "install mesa-vulkan-drivers",
        Command::new("apt-get")
            .args([
                "install",
                "-y",
                "--no-install-recommends",
                "mesa-vulkan-drivers",
                "libvulkan1",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}
