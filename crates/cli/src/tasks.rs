//! `rstar tasks`: write problems of the embedded task set as a dataset file.
//!
//! The embedded default trains on generated integer problems; this writes any split of them in
//! the schema of `../shared/datasets` (`{"id", "problem", "answer", "source"}`), so `rstar eval
//! --data` can evaluate a checkpoint on problems of the trainer's held-out splits (the same
//! split rule; the trainer draws its own evaluation set from it with its own seed).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};

use rstar_agent::tasks::{Split, TaskConfig, TaskSet, write_problems};

/// Arguments of `rstar tasks`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The split: `train`, `held-out` (training kinds, held-out numbers) or `held-out-kinds`.
    #[arg(long, default_value = "held-out")]
    pub split: String,
    /// How many problems.
    #[arg(long, default_value_t = 64)]
    pub n: usize,
    /// Seed of the draw (the same seed gives the same problems).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Write to this file instead of stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Parses a split name (`held-out` and `held_out` both work).
pub fn parse_split(name: &str) -> anyhow::Result<Split> {
    Ok(match name.replace('_', "-").as_str() {
        "train" => Split::Train,
        "held-out" => Split::HeldOut,
        "held-out-kinds" => Split::HeldOutKinds,
        other => bail!("--split `{other}`: expected train, held-out or held-out-kinds"),
    })
}

/// Runs `rstar tasks`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let split = parse_split(&args.split)?;
    if args.n == 0 {
        bail!("--n must be at least 1");
    }
    let set = TaskSet::new(TaskConfig::embedded_default())?;
    let problems: Vec<_> = set
        .generate(split, args.n, args.seed)?
        .iter()
        .map(|t| t.to_problem())
        .collect();
    match &args.out {
        Some(path) => write_problems(path, &problems)
            .with_context(|| format!("writing {}", path.display()))?,
        None => {
            let mut out = std::io::stdout().lock();
            for p in &problems {
                writeln!(out, "{}", serde_json::to_string(p)?)?;
            }
        }
    }
    Ok(())
}
