//! `rstar analyze`: analyses of recorded trajectories; `entropy` is the paper's §6 token-entropy
//! analysis (see `docs/analysis.md`).
//!
//! `rstar analyze entropy FILE` prints a table (or `--json`) of the top-q highest-entropy
//! assistant tokens split into reasoning, the first tokens after a tool response, and code, with
//! the most frequent tokens of each group and the split by outcome; `--plot OUT.svg` also draws
//! entropy along trajectory `--trajectory K`; `--compare A B` puts two files side by side.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use rstar_agent::analysis::entropy::{
    EntropyConfig, EntropyReport, analyze, render_compare, render_table,
};
use rstar_agent::analysis::{parse_trajectories, plot};
use rstar_agent::episode::Trajectory;

/// Arguments of `rstar analyze`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which analysis.
    #[command(subcommand)]
    pub command: Analysis,
}

/// The analyses.
#[derive(Debug, clap::Subcommand)]
pub enum Analysis {
    /// High-entropy tokens: in reasoning, right after tool responses, in code; by outcome.
    Entropy(EntropyArgs),
}

/// Arguments of `rstar analyze entropy`.
#[derive(Debug, clap::Args)]
pub struct EntropyArgs {
    /// Trajectory JSONL with recorded `entropies`.
    #[arg(required_unless_present = "compare", conflicts_with = "compare")]
    pub file: Option<PathBuf>,
    /// Compare two trajectory files (e.g. two checkpoints) side by side.
    #[arg(long, num_args = 2, value_names = ["A", "B"])]
    pub compare: Option<Vec<PathBuf>>,
    /// The fraction of assistant tokens called high-entropy.
    #[arg(long, default_value_t = 0.2)]
    pub top: f64,
    /// Assistant tokens after a tool response that count as the reaction to it.
    #[arg(long, default_value_t = 20)]
    pub after_tool: usize,
    /// Frequent tokens listed per group.
    #[arg(long, default_value_t = 8)]
    pub tokens: usize,
    /// Example contexts per listed token.
    #[arg(long, default_value_t = 2)]
    pub examples: usize,
    /// Print JSON instead of a table (with `--compare`: `{"a": …, "b": …}`).
    #[arg(long)]
    pub json: bool,
    /// Write an SVG of entropy along one trajectory (see `--trajectory`).
    #[arg(long, value_name = "OUT.svg", conflicts_with = "compare")]
    pub plot: Option<PathBuf>,
    /// The trajectory to plot, 0-based line order.
    #[arg(long, default_value_t = 0, requires = "plot")]
    pub trajectory: usize,
}

/// Runs `rstar analyze`.
pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        Analysis::Entropy(a) => entropy(a),
    }
}

fn load(path: &Path) -> anyhow::Result<Vec<Trajectory>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(parse_trajectories(&text, path)?)
}

fn report(path: &Path, trajs: &[Trajectory], cfg: &EntropyConfig) -> anyhow::Result<EntropyReport> {
    analyze(trajs, cfg).with_context(|| format!("{}", path.display()))
}

fn entropy(a: EntropyArgs) -> anyhow::Result<()> {
    let cfg = EntropyConfig {
        top: a.top,
        after_tool: a.after_tool,
        top_tokens: a.tokens,
        examples: a.examples,
        ..EntropyConfig::paper()
    };
    if let Some(pair) = &a.compare {
        let [pa, pb] = pair.as_slice() else {
            bail!("--compare takes two files");
        };
        let ra = report(pa, &load(pa)?, &cfg)?;
        let rb = report(pb, &load(pb)?, &cfg)?;
        if a.json {
            let v = serde_json::json!({
                "a": {"file": pa, "report": ra},
                "b": {"file": pb, "report": rb},
            });
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            print!(
                "{}",
                render_compare(
                    &pa.display().to_string(),
                    &ra,
                    &pb.display().to_string(),
                    &rb
                )
            );
        }
        return Ok(());
    }
    let path = a
        .file
        .as_deref()
        .expect("clap requires FILE without --compare");
    let trajs = load(path)?;
    let r = report(path, &trajs, &cfg)?;
    if let Some(out) = &a.plot {
        let Some(t) = trajs.get(a.trajectory) else {
            bail!(
                "--trajectory {} is out of range: {} has {} trajectories",
                a.trajectory,
                path.display(),
                trajs.len()
            );
        };
        let svg = plot::entropy_svg(t, Some(r.threshold), cfg.after_tool)
            .with_context(|| format!("{} trajectory {}", path.display(), a.trajectory))?;
        std::fs::write(out, svg).with_context(|| format!("cannot write {}", out.display()))?;
        eprintln!("wrote {}", out.display());
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        print!("{}", render_table(&r));
    }
    Ok(())
}
