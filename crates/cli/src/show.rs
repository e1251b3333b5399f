//! `rstar show`: print one rollout of a trajectory JSONL the way a person debugs a policy.
//!
//! The header says which rollout, why it stopped, the reward, answer and ground truth and a
//! summary of its tool calls; then every turn follows with its token span, tool calls
//! highlighted in the assistant text, the final answer in bold, tool responses green when the
//! call worked and red when it failed. Colour is ANSI, on when stdout is a terminal and
//! `NO_COLOR` is unset; `--no-color` and `--color` override. The rendering is
//! `rstar_analysis::trajectory`'s, the one the run report uses: this module picks the rollout.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{Context, bail};

use rstar_agent::analysis::parse_trajectories;
use rstar_agent::analysis::trajectory::{self, TextStyle};

/// Arguments of `rstar show`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Trajectory JSONL (as written by the agent loop, `rstar eval` or training).
    pub file: PathBuf,
    /// Which rollout, 0-based line order (blank lines not counted).
    #[arg(long, short, conflicts_with = "id")]
    pub index: Option<usize>,
    /// Which rollout by problem id (the first sample, or `--sample`).
    #[arg(long)]
    pub id: Option<String>,
    /// With `--id`: which sample of the problem.
    #[arg(long, requires = "id")]
    pub sample: Option<u32>,
    /// List the rollouts one a line instead of showing one.
    #[arg(long, conflicts_with_all = ["index", "id"])]
    pub list: bool,
    /// Print the whole prompt (by default only its last 240 characters).
    #[arg(long)]
    pub prompt: bool,
    /// No ANSI colours (also: `NO_COLOR` set, or stdout not a terminal).
    #[arg(long, conflicts_with = "color")]
    pub no_color: bool,
    /// ANSI colours even when stdout is not a terminal (for `less -R`).
    #[arg(long)]
    pub color: bool,
}

/// Runs `rstar show`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let trajs = parse_trajectories(&text, &args.file)?;
    if trajs.is_empty() {
        bail!("{}: no trajectories", args.file.display());
    }
    let color = if args.no_color {
        false
    } else if args.color {
        true
    } else {
        std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stdout().is_terminal()
    };
    let style = TextStyle {
        color,
        whole_prompt: args.prompt,
    };
    if args.list {
        for (i, t) in trajs.iter().enumerate() {
            print!("{}", trajectory::list_line(i, t, &style));
        }
        return Ok(());
    }
    let index = match (&args.id, args.index) {
        (Some(id), _) => trajs
            .iter()
            .position(|t| &t.id == id && args.sample.is_none_or(|s| t.sample == s))
            .with_context(|| match args.sample {
                Some(s) => format!("no trajectory with id `{id}` and sample {s}"),
                None => format!("no trajectory with id `{id}`"),
            })?,
        (None, Some(k)) if k >= trajs.len() => bail!(
            "--index {k} is out of range: {} has {} trajectories",
            args.file.display(),
            trajs.len()
        ),
        (None, k) => k.unwrap_or(0),
    };
    let view = trajectory::view(&trajs[index]);
    print!("{}", trajectory::text(&view, index, trajs.len(), &style));
    Ok(())
}
