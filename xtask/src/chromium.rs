//! Headless Chromium for the run-report test (`rstar-cli`'s `tests/cli/train_report.rs` opens a
//! smoke run's `report.html` with `chromium --headless --dump-dom`): Debian's `chromium`
//! package, installed with apt-get when no browser is on `PATH` and `RSTAR_CHROMIUM` is unset.
//! About 100 MB to download; a minute on a fast mirror, nothing when already there.

use std::process::Command;

use anyhow::{Context, Result};

use crate::util::step;

/// Whether a `chromium` (or `chromium-browser`) binary is on `PATH`.
fn on_path() -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths)
            .any(|d| d.join("chromium").is_file() || d.join("chromium-browser").is_file())
    })
}

/// Installs Debian's `chromium` when no browser is found.
pub fn ensure() -> Result<()> {
    if std::env::var_os("RSTAR_CHROMIUM").is_some() || on_path() {
        return Ok(());
    }
    eprintln!("==> installing headless Chromium for the report test (Debian package `chromium`)");
    step("apt-get update", Command::new("apt-get").arg("update"))
        .context("apt-get is needed to install chromium (run as root on Debian/Ubuntu, or set RSTAR_CHROMIUM)")?;
    step(
        "install chromium",
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", "chromium"])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}
