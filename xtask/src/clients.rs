//! `cargo xtask test-clients`: the Python wheel under the real trainers' own code, which needs torch (slow, ~6 GB; `.ci/engines`, not `cargo xtask ci`).
//!
//! 1. TRL's `GRPOTrainer`, two steps of a tiny random Qwen3 (the real Qwen3 tokenizer) on CPU,
//!    with `rstar_agent.trl_reward` as its reward function
//!    (`crates/python/examples/trl_grpo.py`);
//! 2. OpenRLHF's own remote reward-model client (`openrlhf.utils.agent`, what
//!    `--remote_rm_url` runs) against `rstar verify serve`
//!    (`crates/python/examples/openrlhf_remote_rm.py`).
//!
//! The packages go into `target/clients-venv` (PyPI's torch, trl, datasets; openrlhf without
//! its GPU dependencies, plus the two modules its client imports), made once.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};

use crate::util::{root, step};
use crate::venv::{create, pip_install};

/// Bump to remake the virtualenv.
const STAMP: &str = ".rstar-clients-1";

/// A child killed when the check ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ensure_venv(root: &Path) -> Result<PathBuf> {
    let venv = root.join("target").join("clients-venv");
    let python = venv.join("bin").join("python");
    if python.exists() && venv.join(STAMP).exists() {
        return Ok(python);
    }
    create(&venv)?;
    step(
        "install torch, trl and datasets (PyPI; about 6 GB)",
        pip_install(&python).args(["trl", "datasets", "aiohttp", "pylatexenc"]),
    )?;
    // openrlhf's own requirements (deepspeed, flash-attn, vllm, ...) are GPU builds its remote
    // reward client does not use.
    step(
        "install openrlhf (its client only, without its GPU dependencies)",
        pip_install(&python).args(["--no-deps", "openrlhf"]),
    )?;
    std::fs::write(venv.join(STAMP), "")?;
    Ok(python)
}

/// Starts `rstar verify serve --port 0` and returns it with its `host:port`.
fn verify_server(rstar: &Path) -> Result<(Server, String)> {
    let mut child = Command::new(rstar)
        .args(["verify", "serve", "--port", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {} verify serve", rstar.display()))?;
    let stderr = child.stderr.take().context("stderr is piped")?;
    let server = Server(child);
    for line in BufReader::new(stderr).lines() {
        let line = line?;
        if let Some(rest) = line.split("listening on http://").nth(1) {
            let addr = rest.split_whitespace().next().unwrap_or("").to_string();
            return Ok((server, addr));
        }
    }
    bail!("rstar verify serve exited before listening")
}

pub fn run(args: &[String]) -> Result<()> {
    if let Some(extra) = args.first() {
        bail!("`cargo xtask test-clients` takes no arguments (got `{extra}`)");
    }
    let root = root();
    let python = ensure_venv(&root)?;
    let wheel = crate::wheel::build(&python)?;
    crate::wheel::install(&python, &wheel)?;
    let rstar = crate::util::release_rstar()?;
    let shared = std::env::var_os("RSTAR_SHARED")
        .map_or_else(|| root.join("..").join("shared"), PathBuf::from);
    let examples = root.join("crates").join("python").join("examples");
    let out = root.join("target").join("clients-out");
    let _ = std::fs::remove_dir_all(&out);
    step(
        "TRL GRPOTrainer: two steps on CPU with rstar_agent.trl_reward",
        Command::new(&python)
            .arg(examples.join("trl_grpo.py"))
            .arg(shared.join("fixtures/qwen/tokenizer_qwen3"))
            .arg(&out)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
    )?;
    let (server, addr) = verify_server(&rstar)?;
    step(
        "OpenRLHF's remote reward-model client against rstar verify serve",
        Command::new(&python)
            .arg(examples.join("openrlhf_remote_rm.py"))
            .arg(format!("http://{addr}/get_reward"))
            .env("PYTHONDONTWRITEBYTECODE", "1"),
    )?;
    drop(server);
    eprintln!("==> test-clients: TRL and OpenRLHF ran against the wheel and rstar verify serve");
    Ok(())
}
