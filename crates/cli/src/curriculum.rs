//! `rstar curriculum`: show a staged-training curriculum, and filter a dataset
//! down to its hard problems from rollout results, with `rstar-curriculum`.
//!
//! `filter` reads rollouts as JSONL: the problem id in `--rollout-key` (default
//! `id`; strings compared as they are, other JSON values by their JSON text)
//! and `reward` (a number, `> 0` is solved, or `true`/`false`): `rstar eval`'s and
//! `rstar train`'s `trajectories.jsonl` as they are. A line without `reward` but with
//! `samples` and `correct` (`rstar eval`'s `results.jsonl`) counts as that many rollouts, that
//! many of them solved. The dataset is
//! JSONL with the problem id in `--data-key` (default `id`); the lines of the
//! problems kept are written to `--out` byte for byte, in dataset order.
//! Malformed lines are reported with their file and line number and fail the run.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use rstar_agent::curriculum::{CurriculumConfig, HardFilter, PassCounts};
use serde_json::Value;

/// Arguments of `rstar curriculum`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub command: Sub,
}

/// `rstar curriculum` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Sub {
    /// Print a curriculum's stages as a table.
    Show {
        /// A preset: `rstar2-agent` (the paper's three stages) or `tiny`.
        #[arg(long, default_value = "rstar2-agent", conflicts_with = "config")]
        preset: String,
        /// A TOML curriculum file instead of a preset.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print the configuration as TOML instead of a table.
        #[arg(long)]
        toml: bool,
    },
    /// Write the problems of a dataset that rollouts do not solve every time.
    Filter {
        /// Rollout results (JSONL with the problem id and `reward`).
        #[arg(long)]
        rollouts: PathBuf,
        /// Samples expected per problem.
        #[arg(long, default_value_t = 8)]
        k: u32,
        /// Keep problems whose pass rate is strictly below this.
        #[arg(long, default_value_t = 1.0)]
        below: f64,
        /// The dataset (JSONL with the problem id).
        #[arg(long)]
        data: PathBuf,
        /// Where to write the hard subset.
        #[arg(long)]
        out: PathBuf,
        /// Field of a rollout that names its problem.
        #[arg(long, default_value = "id")]
        rollout_key: String,
        /// Field of a dataset line that names its problem.
        #[arg(long, default_value = "id")]
        data_key: String,
    },
}

/// Runs `rstar curriculum`.
pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        Sub::Show {
            preset,
            config,
            toml,
        } => {
            let c = match config {
                Some(path) => CurriculumConfig::from_toml_file(&path)?,
                None => CurriculumConfig::preset(&preset)?,
            };
            if toml {
                print!("{}", c.to_toml());
            } else {
                print!("{}", c.table());
            }
            Ok(())
        }
        Sub::Filter {
            rollouts,
            k,
            below,
            data,
            out,
            rollout_key,
            data_key,
        } => filter(
            &rollouts,
            &data,
            &out,
            HardFilter { k, below },
            &rollout_key,
            &data_key,
        ),
    }
}

/// A non-blank JSONL line: its 1-based number, its bytes (newline included) and its value.
type Row = (usize, std::ops::Range<usize>, Value);

/// The bytes of a JSONL file and its non-blank lines.
fn jsonl(path: &Path) -> anyhow::Result<(Vec<u8>, Vec<Row>)> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut rows = Vec::new();
    let mut start = 0;
    let mut number = 0;
    while start < bytes.len() {
        number += 1;
        let end = bytes[start..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len(), |p| start + p + 1);
        let line = &bytes[start..end];
        if !line.iter().all(u8::is_ascii_whitespace) {
            let value: Value = serde_json::from_slice(line)
                .with_context(|| format!("{}:{number}: invalid JSON", path.display()))?;
            rows.push((number, start..end, value));
        }
        start = end;
    }
    Ok((bytes, rows))
}

fn key(value: &Value, field: &str, path: &Path, line: usize) -> anyhow::Result<String> {
    match value.get(field) {
        None | Some(Value::Null) => bail!("{}:{line}: missing field `{field}`", path.display()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Ok(other.to_string()),
    }
}

fn filter(
    rollouts: &Path,
    data: &Path,
    out: &Path,
    rule: HardFilter,
    rollout_key: &str,
    data_key: &str,
) -> anyhow::Result<()> {
    let mut counts = PassCounts::new();
    let (_, rows) = jsonl(rollouts)?;
    for (line, _, value) in &rows {
        let id = key(value, rollout_key, rollouts, *line)?;
        // `rstar eval`'s results.jsonl: a problem's samples and how many were right.
        if value.get("reward").is_none()
            && let (Some(samples), Some(correct)) = (
                value.get("samples").and_then(Value::as_u64),
                value.get("correct").and_then(Value::as_u64),
            )
        {
            if correct > samples {
                bail!(
                    "{}:{line}: `correct` ({correct}) is more than `samples` ({samples})",
                    rollouts.display()
                );
            }
            for i in 0..samples {
                counts.record(&id, i < correct);
            }
            continue;
        }
        let solved = match value.get("reward") {
            Some(Value::Bool(b)) => *b,
            Some(Value::Number(n)) => match n.as_f64() {
                Some(r) if r.is_finite() => r > 0.0,
                _ => bail!(
                    "{}:{line}: field `reward` is not a finite number",
                    rollouts.display()
                ),
            },
            Some(other) => bail!(
                "{}:{line}: field `reward` is not a number: {other}",
                rollouts.display()
            ),
            None => bail!(
                "{}:{line}: missing field `reward` (a rollout's: `rstar eval`'s trajectories.jsonl has it, its results.jsonl has `samples` and `correct`)",
                rollouts.display()
            ),
        };
        counts.record(&id, solved);
    }
    let (bytes, rows) = jsonl(data)?;
    let ids: Vec<String> = rows
        .iter()
        .map(|(line, _, value)| key(value, data_key, data, *line))
        .collect::<anyhow::Result<_>>()?;
    let (keep, report) = rule.apply(&ids, &counts)?;
    let mut kept = Vec::new();
    for ((_, range, _), k) in rows.iter().zip(&keep) {
        if *k {
            kept.extend_from_slice(&bytes[range.clone()]);
        }
    }
    std::fs::write(out, kept).with_context(|| format!("cannot write {}", out.display()))?;
    eprintln!("rstar curriculum filter: {report}");
    eprintln!("wrote {}", out.display());
    Ok(())
}
