//! `rstar roc`: Resample-on-Correct down-sampling of a JSONL rollout dump with `rstar-roc`.
//!
//! Input: one rollout a line (stdin or `--input FILE`) with `uid` (the group),
//! `reward`, and either `response` (rollout text in the reference format) or
//! structured counts (`tool_calls`, `failed_calls`, `timed_out_calls`,
//! `parse_failures`, `answers`, `unbalanced_answers`, `assistant_turns`); see
//! `rstar_roc::jsonl`. Every other field is passed through: the kept lines are
//! written to stdout (or `--output FILE`) byte for byte, in input order. The
//! metrics, named as the reference names them, go to stderr.
//!
//! Malformed lines are reported on stderr with their line number; the run then
//! fails without writing anything, unless `--skip-malformed` drops them.

use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::{Context, bail};
use rstar_roc::jsonl::JsonlBatch;
use rstar_roc::{PenaltyOptions, RocConfig, select};

/// Which penalty heuristics to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Penalties {
    /// Timeouts and parse failures count as errors, every turn counts.
    Paper,
    /// The reference's text heuristics: the substring `error`, the first turn not counted.
    Reference,
}

/// Down-sampling rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    /// Each side halved in proportion (⌊n_neg/2⌋ failures of 2G, uniformly; the rest
    /// successes ∝ 1/p_total), seeded.
    Paper,
    /// microsoft/rStar's deterministic rule, exactly.
    Reference,
}

/// Arguments of `rstar roc`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// JSONL rollouts to read (default: stdin).
    #[arg(long, short)]
    pub input: Option<PathBuf>,
    /// Where to write the kept lines (default: stdout).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// Down-sampling rule.
    #[arg(long, value_enum, default_value = "paper")]
    pub mode: ModeArg,
    /// Traces kept per group (the reference's `down_sample_to_n`).
    #[arg(long, default_value_t = 16)]
    pub keep: usize,
    /// Floor on kept failures (`min_zero_reward_trace_num`) [default: 0 with --mode paper,
    /// 2 with --mode reference].
    #[arg(long, value_name = "N")]
    pub min_failures: Option<usize>,
    /// Floor on kept successes (`min_non_zero_reward_trace_num`) [default: 0 with --mode
    /// paper, 2 with --mode reference].
    #[arg(long, value_name = "N")]
    pub min_successes: Option<usize>,
    /// Seed of the paper mode's sampling.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Drop groups whose rewards are all equal first.
    #[arg(long)]
    pub reject_equal_reward: bool,
    /// Penalty heuristics (default: those of --mode).
    #[arg(long, value_enum)]
    pub penalties: Option<Penalties>,
    /// Leave p_err out of p_total.
    #[arg(long)]
    pub no_error_ratio: bool,
    /// Leave p_format out of p_total.
    #[arg(long)]
    pub no_answer_format: bool,
    /// Drop malformed lines (still reported) instead of failing.
    #[arg(long)]
    pub skip_malformed: bool,
}

impl Args {
    fn config(&self) -> RocConfig {
        let (defaults, default_penalties) = match self.mode {
            ModeArg::Paper => (RocConfig::paper(), Penalties::Paper),
            ModeArg::Reference => (RocConfig::reference(), Penalties::Reference),
        };
        let mut penalties = match self.penalties.unwrap_or(default_penalties) {
            Penalties::Paper => PenaltyOptions::paper(),
            Penalties::Reference => PenaltyOptions::reference(),
        };
        penalties.error_ratio = !self.no_error_ratio;
        penalties.answer_format = !self.no_answer_format;
        RocConfig {
            mode: defaults.mode,
            keep: self.keep,
            min_failures: self.min_failures.unwrap_or(defaults.min_failures),
            min_successes: self.min_successes.unwrap_or(defaults.min_successes),
            penalties,
            reject_equal_reward: self.reject_equal_reward,
            seed: self.seed,
        }
    }
}

/// Runs `rstar roc`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let config = args.config();
    config.validate()?;
    let (input, name) = match &args.input {
        Some(path) => (
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?,
            path.display().to_string(),
        ),
        None => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .context("cannot read stdin")?;
            (buf, "<stdin>".to_string())
        }
    };
    let (batch, errors) = JsonlBatch::parse_lenient(&input, &name);
    for e in &errors {
        eprintln!("malformed: {e}");
    }
    if !errors.is_empty() && !args.skip_malformed {
        bail!(
            "{} malformed line(s) in {name}; nothing written (--skip-malformed drops them)",
            errors.len()
        );
    }
    let selection = select(&batch.uids, &batch.traces, &config)?;
    let kept = batch.kept_bytes(&input, &selection);
    match &args.output {
        Some(path) => std::fs::write(path, &kept)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(&kept)?;
            out.flush()?;
        }
    }
    let groups = {
        let mut g = batch.uids.clone();
        g.sort_unstable();
        g.dedup();
        g.len()
    };
    eprintln!(
        "rstar roc: mode {}, kept {} of {} traces in {groups} groups ({} skipped lines)",
        format!("{:?}", config.mode).to_lowercase(),
        selection.kept.len(),
        batch.traces.len(),
        errors.len()
    );
    for (name, value) in &selection.metrics {
        eprintln!("  {name} = {value}");
    }
    Ok(())
}
