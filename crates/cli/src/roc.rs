//! `rstar roc`: Resample-on-Correct down-sampling of a JSONL rollout dump with `rstar-roc`.
//!
//! Input: one rollout a line (stdin or `--input FILE`) with `uid` (the group),
//! `reward`, and either `response` (rollout text in the reference format) or
//! structured counts (`tool_calls`, `failed_calls`, `timed_out_calls`,
//! `parse_failures`, `answers`, `unbalanced_answers`, `assistant_turns`); see
//! `rstar_agent::roc::jsonl`. Every other field is passed through: the kept lines are
//! written to stdout (or `--output FILE`) byte for byte, in input order. The
//! metrics, named as the reference names them, go to stderr.
//!
//! rstar's own trajectories (`rstar eval`'s `trajectories.jsonl`, `rstar train`'s
//! `samples.jsonl`: lines with `turns`) are read as they are: grouped by their problem `id` and
//! summarised as the trainer summarises them (`train::rl::trace_summary`). `--group-key` names
//! another group field for either kind.
//!
//! Malformed lines are reported on stderr with their line number (the same error on many lines
//! once, with their count); the run then fails without writing anything, unless
//! `--skip-malformed` drops them.

use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::{Context, bail};
use rstar_agent::roc::jsonl::JsonlBatch;
use rstar_agent::roc::{PenaltyOptions, RocConfig, select};

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
    /// The field that holds a rollout's group [default: `uid`; `id` for rstar's trajectories].
    #[arg(long, value_name = "FIELD")]
    pub group_key: Option<String>,
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
    let (batch, errors) = parse_rollouts(&input, &name, args.group_key.as_deref());
    report_malformed(&errors);
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

/// Whether `input` holds rstar's own trajectories: its first line has `turns`.
fn is_trajectories(input: &[u8]) -> bool {
    input
        .split(|&b| b == b'\n')
        .find(|l| !l.iter().all(u8::is_ascii_whitespace))
        .and_then(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
        .is_some_and(|v| v.get("turns").is_some_and(serde_json::Value::is_array))
}

/// The rollouts of `input`: rstar's trajectories summarised as the trainer does, grouped by
/// `group_key` (default `id`), else `rstar_agent::roc::jsonl`'s lines grouped by `group_key` (default
/// `uid`); and the lines that could not be used.
fn parse_rollouts(
    input: &[u8],
    name: &str,
    group_key: Option<&str>,
) -> (JsonlBatch, Vec<rstar_agent::roc::Error>) {
    if !is_trajectories(input) {
        return JsonlBatch::parse_lenient_keyed(input, name, group_key.unwrap_or("uid"));
    }
    let key = group_key.unwrap_or("id");
    JsonlBatch::parse_lenient_with(input, name, |value| {
        let group = rstar_agent::roc::jsonl::group_of(&value, key)?;
        let t: rstar_agent::episode::Trajectory =
            serde_json::from_value(value).map_err(|e| format!("not a trajectory: {e}"))?;
        Ok((group, rstar_agent::train::rl::trace_summary(&t)))
    })
}

/// Prints the malformed lines: each distinct error once, with how many lines had it.
fn report_malformed(errors: &[rstar_agent::roc::Error]) {
    let mut seen: Vec<(String, String, usize)> = Vec::new();
    for e in errors {
        let (first, message) = match e {
            rstar_agent::roc::Error::Line { message, .. } => (e.to_string(), message.clone()),
            other => (other.to_string(), other.to_string()),
        };
        match seen.iter_mut().find(|(_, m, _)| *m == message) {
            Some((_, _, n)) => *n += 1,
            None => seen.push((first, message, 1)),
        }
    }
    for (first, _, n) in seen {
        if n > 1 {
            eprintln!(
                "malformed: {first} (and {} more lines with the same error)",
                n - 1
            );
        } else {
            eprintln!("malformed: {first}");
        }
    }
}
