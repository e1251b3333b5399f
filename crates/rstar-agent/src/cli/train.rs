//! `rstar train`: SFT on the embedded default, then staged GRPO-RoC, on the CPU (`flex`).
//!
//! Writes `runs/<preset>` (or `--out DIR`): the resolved config, SFT and RL metrics as JSONL,
//! evaluations, checkpoints and sample trajectories (see `rstar_agent::train`), and prints the
//! table of held-out accuracy and tool error rate after SFT and after each stage.

use std::path::PathBuf;

use anyhow::Context;
use burn::tensor::Device;

use crate::train::{self as trainer, TrainConfig};

/// Arguments of `rstar train`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The preset: `smoke` (CI, seconds) or `tiny` (the embedded default, minutes).
    #[arg(long, default_value = "tiny")]
    pub preset: String,
    /// A JSON config file (the layout of `runs/<name>/config.json`); replaces `--preset`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The run directory [default: runs/<preset>].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seed of everything random.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Ablation: plain GRPO on G samples instead of GRPO-RoC (2G rolled out, G kept).
    #[arg(long)]
    pub no_roc: bool,
    /// SFT steps (overrides the preset).
    #[arg(long)]
    pub sft_steps: Option<usize>,
    /// Start from a checkpoint directory (e.g. runs/tiny/checkpoints/sft) instead of a random model.
    #[arg(long)]
    pub init: Option<PathBuf>,
    /// RL learning rate (overrides the preset).
    #[arg(long)]
    pub rl_lr: Option<f64>,
    /// Python interpreter of the tool sandbox.
    #[arg(long, env = "RSTAR_PYTHON")]
    pub python: Option<PathBuf>,
    /// Tool sandbox workers [default: one per CPU].
    #[arg(long)]
    pub workers: Option<usize>,
    /// Print the final report as JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `rstar train`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let mut config = match &args.config {
        Some(path) => TrainConfig::from_json_file(path)?,
        None => TrainConfig::preset(&args.preset)?,
    };
    if let Some(seed) = args.seed {
        config.seed = seed;
    }
    if args.no_roc {
        config.rl.roc = false;
    }
    if let Some(steps) = args.sft_steps {
        config.sft.steps = steps;
    }
    if let Some(dir) = args.init {
        config.init = Some(dir);
    }
    if let Some(lr) = args.rl_lr {
        config.rl.lr = lr;
    }
    if let Some(python) = args.python {
        config.tools.python = python;
    }
    if let Some(workers) = args.workers {
        config.tools.workers = workers;
    }
    let out = args.out.unwrap_or_else(|| {
        PathBuf::from("runs").join(if config.rl.roc {
            config.preset.clone()
        } else {
            format!("{}-no-roc", config.preset)
        })
    });
    let device = Device::flex();
    let report = trainer::run(&config, &out, &device, |line| eprintln!("{line}"))
        .with_context(|| format!("training run in {}", out.display()))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
        println!(
            "sft {:.2} steps/s; rl {:.1}s/step, rollout {:.0} tokens/s; {} RL steps; total {:.1}s; artefacts in {}",
            report.sft_steps_per_sec,
            report.rl_step_secs,
            report.rollout_tokens_per_sec,
            report.rl_steps,
            report.total_secs,
            out.display()
        );
    }
    Ok(())
}
