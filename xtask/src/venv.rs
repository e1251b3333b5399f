//! The Python virtualenv under `target/venv` that tests and benchmarks use.
//!
//! Created with `python3 -m venv` and filled from `xtask/requirements.txt`; a
//! stamp file holding the installed requirements makes the step a no-op when
//! nothing changed, so `cargo xtask ci` is cheap to rerun.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::util::{root, step};

/// Makes sure the virtualenv exists with every test requirement
/// (`xtask/requirements.txt`) installed and returns its Python interpreter.
pub fn ensure() -> Result<PathBuf> {
    ensure_file("requirements.txt")
}

/// The virtualenv with only what training needs (`xtask/requirements-train.txt`: numpy and
/// sympy for the tool sandbox), for `cargo xtask train` and `cargo xtask eval`: a new user's
/// first run does not wait for the test suite's packages.
pub fn ensure_train() -> Result<PathBuf> {
    ensure_file("requirements-train.txt")
}

/// Like [`ensure`], plus the benchmark-only peers of `xtask/requirements-bench.txt`
/// (heavier packages that CI never needs).
pub fn ensure_bench() -> Result<PathBuf> {
    ensure()?;
    ensure_file("requirements-bench.txt")
}

fn ensure_file(name: &str) -> Result<PathBuf> {
    let root = root();
    let venv = root.join("target").join("venv");
    let python = venv.join("bin").join("python");
    let req_path = root.join("xtask").join(name);
    let wanted = std::fs::read_to_string(&req_path)
        .with_context(|| format!("reading {}", req_path.display()))?;
    let stamp = venv.join(format!(".rstar-{name}"));
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(&wanted) {
        return Ok(python);
    }
    create(&venv)?;
    step(
        "install Python requirements",
        pip_install(&python).arg("-r").arg(&req_path),
    )
    .with_context(|| format!("pip could not install xtask/{name} (is PyPI reachable?)"))?;
    std::fs::write(&stamp, wanted)?;
    Ok(python)
}

/// Creates the virtualenv `venv` with the host's Python 3 (`RSTAR_HOST_PYTHON`, else
/// `python3`) unless it exists.
pub fn create(venv: &Path) -> Result<()> {
    if venv.join("bin").join("python").exists() {
        return Ok(());
    }
    let host = std::env::var("RSTAR_HOST_PYTHON").unwrap_or_else(|_| "python3".into());
    step(
        "create virtualenv",
        Command::new(&host).args(["-m", "venv"]).arg(venv),
    )
    .with_context(|| {
        format!("`{host} -m venv` failed: install Python 3 with venv (Debian: python3-venv)")
    })
}

/// `python -m pip install --quiet --disable-pip-version-check`, for the arguments to follow.
pub fn pip_install(python: &Path) -> Command {
    let mut cmd = Command::new(python);
    cmd.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ]);
    cmd
}
