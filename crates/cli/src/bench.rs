//! `rstar bench policy`: rstar-policy against PyTorch on the same random weights, on the CPU or
//! a GPU, with nothing but this binary, a Python with torch and the peer script
//! (`rstar_agent::policy::bench`; `cargo xtask bench policy` runs this subcommand). It is what a
//! lent GPU machine runs (`xtask/gpu/device_check.sh`, issue #67).
//!
//! The one module outside rstar-toolenv that starts processes (docs/ARCHITECTURE.md): the
//! measured peer, `PYTHON policy_peer.py`, and `nvidia-smi` for peak GPU memory, both named by
//! the person running the bench, never by a model.

use std::path::{Path, PathBuf};

use anyhow::Result;

/// Arguments of `rstar bench`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to measure.
    #[command(subcommand)]
    pub command: BenchCommand,
}

/// The `rstar bench` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Prefill and decode tokens/s, a training step (fwd+bwd) and on a GPU peak memory, against
    /// PyTorch eager on the same weights (checked before anything is timed); one table on stdout.
    Policy(PolicyArgs),
}

/// Arguments of `rstar bench policy`.
#[derive(Debug, clap::Args)]
pub struct PolicyArgs {
    #[arg(long, default_value = "flex", help = crate::backend::HELP)]
    pub backend: String,
    /// The model and workloads: `tiny` (the embedded default's model) or `qwen3-0.6b`
    /// (Qwen3-0.6B's shape, random weights).
    #[arg(long, default_value = "tiny")]
    pub shape: String,
    /// Compute precision over f32 weights, both sides: `f32` or `bf16`.
    #[arg(long, default_value = "f32")]
    pub precision: String,
    /// Timed repetitions of each workload (after a warm-up); the median is reported.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Another training batch than the shape's, `BxT` (e.g. `8x1024`).
    #[arg(long, value_name = "BxT")]
    pub train: Option<String>,
    /// Another decoding workload than the shape's, `RxPxS`: R rows, a P-token prompt, S steps
    /// (e.g. `16x1024x64`, decoding over a long cache).
    #[arg(long, value_name = "RxPxS")]
    pub decode: Option<String>,
    /// Another vocabulary size than the shape's.
    #[arg(long)]
    pub vocab: Option<usize>,
    /// The Python that runs the PyTorch peer (a CUDA torch for a GPU backend).
    #[arg(long, env = "RSTAR_PYTHON", default_value = "python3")]
    pub python: PathBuf,
    /// The peer script [default: `policy_peer.py` beside this binary, else
    /// `xtask/bench/policy_peer.py` under the current directory].
    #[arg(long)]
    pub peer: Option<PathBuf>,
    /// The same-weights check's largest |logits difference| [default: 1e-2 in f32, 0.25 in bf16].
    #[arg(long)]
    pub check_tol: Option<f64>,
    /// The GPU's matmul peak (TFLOP/s) no figure may pass [default: 495 in f32, 990 in bf16].
    #[arg(long)]
    pub peak_tflops: Option<f64>,
    /// Rounds alternating the peer and ours, each side keeping its best per workload [default:
    /// 2 on flex, 1 on a GPU].
    #[arg(long)]
    pub rounds: Option<usize>,
}

/// Runs `rstar bench`.
pub fn run(args: Args) -> Result<()> {
    match args.command {
        BenchCommand::Policy(p) => policy(p),
    }
}

/// The peer script `--peer` names, or the first of beside `exe` and under `cwd` that exists.
fn peer_script(peer: Option<PathBuf>, exe: Option<&Path>, cwd: &Path) -> Result<PathBuf> {
    if let Some(p) = peer {
        anyhow::ensure!(p.is_file(), "--peer {}: no such file", p.display());
        return Ok(p);
    }
    let candidates: Vec<PathBuf> = exe
        .and_then(Path::parent)
        .map(|d| d.join("policy_peer.py"))
        .into_iter()
        .chain([cwd.join("xtask/bench/policy_peer.py")])
        .collect();
    candidates.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        anyhow::anyhow!(
            "no peer script: looked for {}; pass --peer PATH (xtask/bench/policy_peer.py in the repository)",
            candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(" and ")
        )
    })
}

#[cfg(feature = "flex")]
fn policy(args: PolicyArgs) -> Result<()> {
    use anyhow::Context as _;
    use rstar_agent::policy::bench::{BenchOptions, parse_decode, parse_train_batch};

    let exe = std::env::current_exe().ok();
    let peer = peer_script(args.peer, exe.as_deref(), &std::env::current_dir()?)?;
    anyhow::ensure!(args.reps >= 1, "--reps 0: at least one repetition");
    anyhow::ensure!(args.rounds != Some(0), "--rounds 0: at least one round");
    let options = BenchOptions {
        backend: crate::backend::resolved(&args.backend).to_string(),
        shape: args
            .shape
            .parse()
            .map_err(|e| anyhow::anyhow!("--shape {e}"))?,
        precision: args
            .precision
            .parse()
            .map_err(|e| anyhow::anyhow!("--precision {e}"))?,
        reps: args.reps,
        rounds: args.rounds,
        train: args
            .train
            .as_deref()
            .map(parse_train_batch)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--train {e}"))?,
        decode: args
            .decode
            .as_deref()
            .map(parse_decode)
            .transpose()
            .map_err(|e| anyhow::anyhow!("--decode {e}"))?,
        vocab: args.vocab,
        check_tol: args.check_tol,
        peak_tflops: args.peak_tflops,
    };
    let device = crate::backend::device_of(&args.backend)?;
    let mut peer = PythonPeer {
        python: args.python,
        script: peer,
    };
    let mut memory = if options.backend == "flex" {
        None
    } else {
        NvidiaSmi::spawn()
    };
    rstar_agent::policy::bench::run(
        &options,
        &device,
        &mut peer,
        memory
            .as_mut()
            .map(|m| m as &mut dyn rstar_agent::policy::bench::MemoryProbe),
    )
    .context("rstar bench policy")?;
    Ok(())
}

/// `PYTHON SCRIPT WEIGHTS SPEC`, its stdout read as JSON.
#[cfg(feature = "flex")]
struct PythonPeer {
    python: PathBuf,
    script: PathBuf,
}

#[cfg(feature = "flex")]
impl rstar_agent::policy::bench::Peer for PythonPeer {
    fn run(
        &mut self,
        weights: &Path,
        spec: &serde_json::Value,
    ) -> std::result::Result<serde_json::Value, String> {
        let out = std::process::Command::new(&self.python)
            .arg(&self.script)
            .arg(weights)
            .arg(spec.to_string())
            .output()
            .map_err(|e| format!("{}: {e}", self.python.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} {} exited with {}: {}",
                self.python.display(),
                self.script.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            ));
        }
        serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("{} printed no JSON answer: {e}", self.script.display()))
    }
}

/// Peak GPU memory: `nvidia-smi --query-gpu=memory.used -lms 20` in the background, its
/// largest reading since the last `start`. `None` without nvidia-smi.
#[cfg(feature = "flex")]
struct NvidiaSmi {
    current: std::sync::Arc<std::sync::atomic::AtomicU64>,
    peak: std::sync::Arc<std::sync::atomic::AtomicU64>,
    base: u64,
    child: std::process::Child,
}

#[cfg(feature = "flex")]
impl NvidiaSmi {
    fn spawn() -> Option<Self> {
        use std::io::BufRead as _;
        use std::sync::Arc;
        use std::sync::atomic::{AtomicU64, Ordering};

        let mut child = std::process::Command::new("nvidia-smi")
            .args([
                "--query-gpu=memory.used",
                "--format=csv,noheader,nounits",
                "-i",
                "0",
                "-lms",
                "20",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        let stdout = child.stdout.take()?;
        let (current, peak) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (c, p) = (current.clone(), peak.clone());
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(mib) = line.trim().parse::<u64>() {
                    c.store(mib, Ordering::Relaxed);
                    p.fetch_max(mib, Ordering::Relaxed);
                }
            }
        });
        std::thread::sleep(std::time::Duration::from_millis(200));
        Some(Self {
            current,
            peak,
            base: 0,
            child,
        })
    }
}

#[cfg(feature = "flex")]
impl rstar_agent::policy::bench::MemoryProbe for NvidiaSmi {
    fn start(&mut self) {
        use std::sync::atomic::Ordering;
        std::thread::sleep(std::time::Duration::from_millis(60));
        self.base = self.current.load(Ordering::Relaxed);
        self.peak.store(self.base, Ordering::Relaxed);
    }

    fn peak_mib(&self) -> u64 {
        std::thread::sleep(std::time::Duration::from_millis(60));
        self.peak
            .load(std::sync::atomic::Ordering::Relaxed)
            .saturating_sub(self.base)
    }
}

#[cfg(feature = "flex")]
impl Drop for NvidiaSmi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(not(feature = "flex"))]
fn policy(_: PolicyArgs) -> Result<()> {
    anyhow::bail!(
        "rstar bench policy: this rstar was built without the `flex` feature, which the bench's CPU side needs (rebuild with `--features flex`)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_is_found_beside_the_binary_then_in_the_checkout() {
        let dir = tempfile::tempdir().unwrap();
        let (bin, repo) = (dir.path().join("bin"), dir.path().join("repo"));
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(repo.join("xtask/bench")).unwrap();
        let exe = bin.join("rstar");
        // Neither: the error names both places and the flag.
        let err = peer_script(None, Some(&exe), &repo)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("bin/policy_peer.py") && err.contains("--peer"),
            "{err}"
        );
        // The checkout's.
        std::fs::write(repo.join("xtask/bench/policy_peer.py"), "").unwrap();
        assert_eq!(
            peer_script(None, Some(&exe), &repo).unwrap(),
            repo.join("xtask/bench/policy_peer.py")
        );
        // Beside the binary wins (the GPU bundle's layout).
        std::fs::write(bin.join("policy_peer.py"), "").unwrap();
        assert_eq!(
            peer_script(None, Some(&exe), &repo).unwrap(),
            bin.join("policy_peer.py")
        );
        // --peer must exist.
        let err = peer_script(Some(dir.path().join("nope.py")), Some(&exe), &repo)
            .unwrap_err()
            .to_string();
        assert!(err.contains("nope.py: no such file"), "{err}");
    }
}
