//! `cargo xtask bench NAME`: benchmarks that print medians and ratios against a
//! peer measured side by side in the same run.

use anyhow::{Result, bail};

/// Every benchmark: its name and what it compares. Each arm of `run` calls
/// `venv::ensure_bench()` first when it needs a Python peer.
const BENCHES: &[(&str, &str)] = &[
    (
        "roc",
        "rstar-roc vs the reference RoC rule in plain Python: a 15K-trace step (parse, penalties, selection), agreement",
    ),
    (
        "verifier",
        "rstar-verifier vs HF math-verify: answers/s (1 thread, rayon), `rstar verify` whole process, agreement; the math mode on MATH-500 (answers/s, agreement by style)",
    ),
    (
        "python",
        "rstar_agent.score (the Python wheel) vs HF math-verify on MATH-500 answers: answers/s, 1 thread and all CPUs, ratio, agreement",
    ),
    (
        "policy",
        "rstar-policy (flex) vs PyTorch on the same weights (`rstar bench policy`; RSTAR_BENCH_REPS, RSTAR_BENCH_ROUNDS): prefill and decode tok/s, a training step (fwd+bwd)",
    ),
    (
        "policy-gpu",
        "rstar-policy on a GPU vs PyTorch on CUDA, same weights (`rstar bench policy`): `bench policy-gpu [SHAPE] [BACKEND]`, SHAPE qwen3-0.6b (default) or tiny, BACKEND wgpu (default) or cuda (with fusion and autotune); RSTAR_BENCH_PRECISION=bf16 for mixed precision; needs a GPU and a CUDA PyTorch (RSTAR_PYTHON)",
    ),
    (
        "memory",
        "rstar-policy's peak heap in one training step (2 × 1,024 tokens) of a random Qwen3-0.6B shape: full fine-tuning in f32 vs LoRA rank 16 over an f32 base, over a bf16 base, and under Burn's gradient checkpointing (`N.N× below full`), with the per-token costs docs/policy.md's projection table uses",
    ),
    (
        "toolenv",
        "rstar-toolenv zygote pool vs spawn-per-call: calls/s, p50/p99 for print(1) and a sympy import",
    ),
    (
        "toolenv-server",
        "rstar-toolserver: calls/s, p50/p99 at 1, 64, 1024 concurrent callers, HTTP /run and the batching client vs the in-process pool",
    ),
    (
        "toolserver",
        "rstar-toolserver at the paper's scale (#46): the fork floor, one call's p50 as a ratio to it, p50/p99 at 1, 64 and 1000 in flight, and 45,056 calls in flight against two `rstar tools serve` (throughput, p50/p99/max, refusals, each call run once, peak RSS, fds and processes before and after), then from a plain code-judge client with no backpressure (#71: throughput against the batching client, calls refused or resent more than once; `RSTAR_BENCH_ONLY=plain` runs these two alone)",
    ),
    (
        "scheduler",
        "rstar-scheduler simulator, rstar2-agent-64gpu over 5 seeds: kv-aware and least-requests vs static (makespan, GPU idle)",
    ),
    (
        "grpo",
        "rstar-grpo (flex) vs verl's formulas in PyTorch and numpy: advantages, loss forward, forward+backward",
    ),
];

pub fn run(args: &[String]) -> Result<()> {
    let Some(name) = args.first() else {
        list();
        bail!("name a benchmark");
    };
    match name.as_str() {
        "verifier" => {
            let python = crate::venv::ensure_bench()?;
            let root = crate::util::root();
            let rstar = crate::util::release_rstar()?;
            crate::util::step(
                "bench rstar-verifier against math-verify",
                crate::util::cargo()
                    .args(["bench", "-p", "rstar-verifier", "--bench", "verifier"])
                    .env("RSTAR_PYTHON", python)
                    .env("RSTAR_PEER", root.join("xtask/bench/verifier_peer.py"))
                    .env("RSTAR_BIN", &rstar),
            )
        }
        "python" => {
            // Only math-verify of the bench requirements: not the 5 GB of torch the policy's
            // peer needs. The requirement is read from xtask/requirements-bench.txt, so the two
            // benches measure the same math-verify.
            let python = crate::venv::ensure()?;
            let bench =
                std::fs::read_to_string(crate::util::root().join("xtask/requirements-bench.txt"))?;
            let Some(peer) = bench
                .lines()
                .find(|l| l.trim_start().starts_with("math-verify"))
            else {
                bail!("xtask/requirements-bench.txt names no math-verify");
            };
            crate::util::step(
                "install math-verify",
                crate::venv::pip_install(&python).arg(peer.trim()),
            )?;
            let wheel = crate::wheel::build(&python)?;
            crate::wheel::install(&python, &wheel)?;
            let root = crate::util::root();
            let shared = std::env::var_os("RSTAR_SHARED")
                .map_or_else(|| root.join("..").join("shared"), std::path::PathBuf::from);
            crate::util::step(
                "bench rstar_agent.score against math-verify",
                std::process::Command::new(&python)
                    .arg(root.join("xtask/bench/python_bench.py"))
                    .arg(shared.join("datasets/math500.jsonl"))
                    .env("PYTHONDONTWRITEBYTECODE", "1"),
            )
        }
        "policy" | "policy-gpu" => {
            // `rstar bench policy` from the release build (rstar_policy::bench). On a GPU the
            // peer needs a CUDA build of PyTorch: the one RSTAR_PYTHON names, else the bench
            // virtualenv's.
            let gpu = name == "policy-gpu";
            let python = match std::env::var_os("RSTAR_PYTHON") {
                Some(p) if gpu => std::path::PathBuf::from(p),
                _ => crate::venv::ensure_bench()?,
            };
            let (backend, features) = if gpu {
                match args.get(2).map_or("wgpu", String::as_str) {
                    "wgpu" => ("wgpu", "wgpu"),
                    "cuda" => ("cuda", "cuda,fusion,autotune"),
                    other => bail!(
                        "bench policy-gpu: backend `{other}`, expected `wgpu` or `cuda` (tch: build rstar with --features tch against PyPI's torch, see xtask/gpu/device_check.sh)"
                    ),
                }
            } else {
                ("flex", "flex")
            };
            let mut command = crate::util::cargo();
            command
                .args(["run", "--release", "-p", "rstar-cli", "--bin", "rstar"])
                .args(["--features", features, "--", "bench", "policy"])
                .arg("--python")
                .arg(&python)
                .args(["--backend", backend])
                .arg("--peer")
                .arg(crate::util::root().join("xtask/bench/policy_peer.py"));
            if gpu {
                command.args(["--shape", args.get(1).map_or("qwen3-0.6b", String::as_str)]);
            }
            // The knobs earlier versions read from the environment.
            for (var, flag) in [
                ("RSTAR_BENCH_REPS", "--reps"),
                ("RSTAR_BENCH_PRECISION", "--precision"),
                ("RSTAR_BENCH_ROUNDS", "--rounds"),
            ] {
                if let Ok(value) = std::env::var(var) {
                    command.args([flag, &value]);
                }
            }
            crate::util::step(
                if gpu {
                    "bench rstar-policy on a GPU against PyTorch on CUDA"
                } else {
                    "bench rstar-policy against PyTorch"
                },
                &mut command,
            )
        }
        "memory" => crate::util::step(
            "bench rstar-policy's training-step memory: full fine-tuning vs LoRA",
            crate::util::cargo().args([
                "bench",
                "-p",
                "rstar-policy",
                "--bench",
                "memory",
                "--features",
                "flex",
            ]),
        ),
        "toolenv" => {
            let python = crate::venv::ensure()?;
            crate::util::step(
                "bench rstar-toolenv: zygote pool vs spawn-per-call",
                crate::util::cargo()
                    .args(["bench", "-p", "rstar-toolenv", "--bench", "toolenv"])
                    .env("RSTAR_PYTHON", python),
            )
        }
        "toolenv-server" => {
            let python = crate::venv::ensure()?;
            crate::util::step(
                "bench rstar-toolserver: local server vs the in-process pool",
                crate::util::cargo()
                    .args([
                        "bench",
                        "-p",
                        "rstar-toolserver",
                        "--bench",
                        "toolenv_server",
                    ])
                    .env("RSTAR_PYTHON", python),
            )
        }
        "toolserver" => {
            let python = crate::venv::ensure()?;
            let root = crate::util::root();
            let rstar = crate::util::release_rstar()?;
            crate::util::step(
                "bench rstar-toolserver at the paper's scale",
                crate::util::cargo()
                    .args(["bench", "-p", "rstar-toolserver", "--bench", "toolserver"])
                    .env("RSTAR_PYTHON", python)
                    .env("RSTAR_FLOOR", root.join("xtask/bench/fork_floor.py"))
                    .env("RSTAR_BIN", &rstar),
            )
        }
        "scheduler" => crate::util::step(
            "bench rstar-scheduler: dispatch policies against static",
            crate::util::cargo().args(["bench", "-p", "rstar-scheduler", "--bench", "simulate"]),
        ),
        "roc" => {
            let python = crate::venv::ensure()?;
            let root = crate::util::root();
            crate::util::step(
                "bench rstar-roc against the reference rule in Python",
                crate::util::cargo()
                    .args(["bench", "-p", "rstar-roc", "--bench", "roc"])
                    .env("RSTAR_PYTHON", python)
                    .env("RSTAR_PEER", root.join("xtask/bench/roc_peer.py")),
            )
        }
        "grpo" => {
            let python = crate::venv::ensure_bench()?;
            crate::util::step(
                "bench rstar-grpo against verl's formulas (PyTorch, numpy)",
                crate::util::cargo()
                    .args(["bench", "-p", "rstar-grpo", "--bench", "grpo"])
                    .env("RSTAR_PYTHON", python),
            )
        }
        other => {
            list();
            bail!("unknown benchmark `{other}`")
        }
    }
}

fn list() {
    eprintln!("benchmarks (cargo xtask bench NAME):");
    if BENCHES.is_empty() {
        eprintln!("  (none yet)");
    }
    for (name, what) in BENCHES {
        eprintln!("  {name:<16} {what}");
    }
}
