//! Evaluation: k samples of every problem through [`scheduled`](crate::scheduled) rollouts, and
//! the metrics the paper reports (`rstar eval`).
//!
//! The metrics are a pure function of the trajectories ([`EvalReport::from_trajectories`]):
//!
//! - **avg@k**: the mean over problems of `c / n` (the share of a problem's `n` samples that are
//!   correct), the paper's "average pass@1 over k samples";
//! - **pass@k**: the unbiased estimator `1 − C(n−c, k) / C(n, k)` averaged over problems, for
//!   `k` = 1, 2, 4, … up to `n` and `n` itself (computed as the stable product
//!   `1 − ∏_{i=n−c+1}^{n} (1 − k/i)`);
//! - mean response length in tokens (assistant and tool tokens), tool calls per problem and per
//!   sample, the tool error rate (errors, timeouts and malformed calls over all calls), the
//!   truncation rate, and the count of each stop reason;
//! - per problem: id, samples, correct count, avg, mean length, tool calls, tool errors,
//!   truncations.
//!
//! [`run_eval`] rolls out and scores; [`write_outputs`] writes `results.jsonl` (one
//! [`ProblemResult`] a line), `trajectories.jsonl` (every [`Trajectory`], which `rstar show` and
//! `rstar analyze entropy` read) and `summary.json` ([`EvalSummaryFile`]).
//!
//! ```
//! use rstar_rollout::eval::{EvalReport, pass_at_k};
//!
//! // 5 samples, 2 correct: pass@1 = 2/5, pass@2 = 1 − C(3,2)/C(5,2) = 1 − 3/10.
//! assert!((pass_at_k(5, 2, 1) - 0.4).abs() < 1e-12);
//! assert!((pass_at_k(5, 2, 2) - 0.7).abs() < 1e-12);
//! assert_eq!(pass_at_k(5, 2, 4), 1.0); // only 3 wrong samples: any 4 contain a correct one
//! assert!(EvalReport::from_trajectories(&[]).unwrap().problems.is_empty());
//! ```

use rstar_episode::IoError;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rstar_policy::Sampling;
use rstar_scheduler::DispatchStats;
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::scheduled::{AsyncTools, ProgressFn, ScheduleConfig, run_scheduled};
use crate::{Prompt, RolloutStats};
use rstar_engine::TurnGenerator;
use rstar_episode::episode::{TextTokenizer, Trajectory};

/// The unbiased pass@k estimate for one problem with `n` samples of which `c` are correct:
/// `1 − C(n−c, k) / C(n, k)`; 1 when fewer than `k` samples are wrong. `k` must be in `1..=n`
/// (0 gives 0, and `k > n` is treated as `n`).
pub fn pass_at_k(n: usize, c: usize, k: usize) -> f64 {
    let k = k.min(n);
    if k == 0 || c == 0 {
        return 0.0;
    }
    if n - c.min(n) < k {
        return 1.0;
    }
    // C(n−c, k) / C(n, k) = ∏_{i=n−c+1}^{n} (1 − k/i).
    let miss: f64 = (n - c + 1..=n).map(|i| 1.0 - k as f64 / i as f64).product();
    1.0 - miss
}

/// The `k` values reported for `n` samples: powers of two below `n`, then `n`.
pub fn reported_ks(n: usize) -> Vec<usize> {
    let mut ks = Vec::new();
    let mut k = 1;
    while k < n {
        ks.push(k);
        k *= 2;
    }
    if n > 0 {
        ks.push(n);
    }
    ks
}

/// One pass@k value; defined in `rstar-analysis`, which reads it back from `eval.jsonl`.
pub use rstar_episode::records::PassAtK;

/// The results of one problem (one line of `results.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProblemResult {
    /// The problem id.
    pub id: String,
    /// The ground truth, when the trajectories carry it.
    pub answer: Option<String>,
    /// Samples rolled out.
    pub samples: usize,
    /// Samples with a positive reward.
    pub correct: usize,
    /// `correct / samples`.
    pub avg: f64,
    /// Mean response length in tokens (assistant and tool tokens).
    pub mean_response_tokens: f64,
    /// Tool calls over all samples (malformed calls included).
    pub tool_calls: usize,
    /// Of those, errors, timeouts and malformed calls.
    pub tool_errors: usize,
    /// Samples that ran out of room.
    pub truncated: usize,
    /// The extracted answer of each sample, in sample order (`null` when none).
    pub extracted: Vec<Option<String>>,
}

/// The headline numbers of an evaluation.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct EvalSummary {
    /// Problems evaluated.
    pub problems: usize,
    /// Trajectories (problems × samples).
    pub trajectories: usize,
    /// Samples per problem (the smallest, should they differ).
    pub samples: usize,
    /// avg@k: the mean over problems of the share of correct samples.
    pub avg_at_k: f64,
    /// pass@k for `k` = 1, 2, 4, … and `samples`.
    pub pass_at_k: Vec<PassAtK>,
    /// Mean response length in tokens (assistant and tool tokens) over trajectories.
    pub mean_response_tokens: f64,
    /// Mean assistant (policy-written) tokens over trajectories.
    pub mean_assistant_tokens: f64,
    /// Tool calls over all samples, divided by the number of problems.
    pub tool_calls_per_problem: f64,
    /// Tool calls per trajectory.
    pub tool_calls_per_sample: f64,
    /// Tool errors (errors, timeouts, malformed calls) over tool calls; 0 without calls.
    pub tool_error_rate: f64,
    /// Truncated trajectories over trajectories.
    pub truncation_rate: f64,
    /// How many trajectories ended for each stop reason.
    pub stop_reasons: BTreeMap<String, usize>,
}

/// The metrics of an evaluation: the summary and one [`ProblemResult`] per problem, in the order
/// problems first appear.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct EvalReport {
    /// The headline numbers.
    pub summary: EvalSummary,
    /// Per problem.
    pub problems: Vec<ProblemResult>,
}

impl EvalReport {
    /// Computes the report from scored trajectories, grouped by their `id` (a missing reward
    /// counts as wrong).
    ///
    /// # Errors
    /// [`rstar_episode::Error::Trajectory`] when a trajectory has no problem id.
    pub fn from_trajectories(trajectories: &[Trajectory]) -> Result<Self, Error> {
        let mut order: Vec<&str> = Vec::new();
        let mut groups: HashMap<&str, Vec<&Trajectory>> = HashMap::new();
        for (i, t) in trajectories.iter().enumerate() {
            if t.id.is_empty() {
                return Err(Error::Episode(rstar_episode::Error::Trajectory(format!(
                    "trajectory {i} has an empty `id`: the report groups samples by problem id"
                ))));
            }
            groups
                .entry(t.id.as_str())
                .or_insert_with(|| {
                    order.push(t.id.as_str());
                    Vec::new()
                })
                .push(t);
        }
        let ratio = |a: f64, b: usize| if b == 0 { 0.0 } else { a / b as f64 };
        let mut problems = Vec::with_capacity(order.len());
        let mut s = EvalSummary::default();
        let (mut len, mut assistant, mut calls, mut errors, mut truncated) = (0, 0, 0, 0, 0);
        for id in &order {
            let mut group = groups.remove(id).unwrap_or_default();
            group.sort_by_key(|t| t.sample);
            let n = group.len();
            let correct = group
                .iter()
                .filter(|t| t.reward.unwrap_or(0.0) > 0.0)
                .count();
            let p_len: usize = group.iter().map(|t| t.response_ids.len()).sum();
            let p_calls: usize = group.iter().map(|t| t.tool_calls.len()).sum();
            let p_errors: usize = group.iter().map(|t| t.tool_errors()).sum();
            let p_trunc = group.iter().filter(|t| t.truncated).count();
            len += p_len;
            assistant += group
                .iter()
                .map(|t| t.assistant_token_count())
                .sum::<usize>();
            calls += p_calls;
            errors += p_errors;
            truncated += p_trunc;
            for t in &group {
                *s.stop_reasons
                    .entry(t.stop.as_str().to_string())
                    .or_default() += 1;
            }
            problems.push(ProblemResult {
                id: id.to_string(),
                answer: group.iter().find_map(|t| t.ground_truth.clone()),
                samples: n,
                correct,
                avg: ratio(correct as f64, n),
                mean_response_tokens: ratio(p_len as f64, n),
                tool_calls: p_calls,
                tool_errors: p_errors,
                truncated: p_trunc,
                extracted: group.iter().map(|t| t.answer.clone()).collect(),
            });
        }
        let count = trajectories.len();
        s.problems = problems.len();
        s.trajectories = count;
        s.samples = problems.iter().map(|p| p.samples).min().unwrap_or(0);
        s.avg_at_k = ratio(problems.iter().map(|p| p.avg).sum(), problems.len());
        s.pass_at_k = reported_ks(s.samples)
            .into_iter()
            .map(|k| PassAtK {
                k,
                value: ratio(
                    problems
                        .iter()
                        .map(|p| pass_at_k(p.samples, p.correct, k))
                        .sum(),
                    problems.len(),
                ),
            })
            .collect();
        s.mean_response_tokens = ratio(len as f64, count);
        s.mean_assistant_tokens = ratio(assistant as f64, count);
        s.tool_calls_per_problem = ratio(calls as f64, problems.len());
        s.tool_calls_per_sample = ratio(calls as f64, count);
        s.tool_error_rate = ratio(errors as f64, calls);
        s.truncation_rate = ratio(truncated as f64, count);
        Ok(EvalReport {
            summary: s,
            problems,
        })
    }

    /// The summary as a small aligned table (what `rstar eval` prints).
    pub fn table(&self) -> String {
        let s = &self.summary;
        let mut rows: Vec<(String, String)> = vec![
            ("problems".into(), s.problems.to_string()),
            ("samples per problem".into(), s.samples.to_string()),
            (format!("avg@{}", s.samples), format!("{:.4}", s.avg_at_k)),
            (format!("avg@{} 95% interval", s.samples), {
                // Wilson's over the problems (`rstar_episode::interval` says why it covers
                // avg@k).
                let i = rstar_episode::interval::Interval::wilson(s.avg_at_k, s.problems);
                format!("[{:.4}, {:.4}]", i.lo, i.hi)
            }),
        ];
        for p in &s.pass_at_k {
            rows.push((format!("pass@{}", p.k), format!("{:.4}", p.value)));
        }
        rows.extend([
            (
                "mean response tokens".into(),
                format!("{:.1}", s.mean_response_tokens),
            ),
            (
                "tool calls / problem".into(),
                format!("{:.2}", s.tool_calls_per_problem),
            ),
            (
                "tool calls / sample".into(),
                format!("{:.2}", s.tool_calls_per_sample),
            ),
            (
                "tool error rate".into(),
                format!("{:.4}", s.tool_error_rate),
            ),
            (
                "truncation rate".into(),
                format!("{:.4}", s.truncation_rate),
            ),
        ]);
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        let mut out = String::new();
        for (k, v) in rows {
            out.push_str(&format!("{k:<width$}  {v}\n"));
        }
        out
    }
}

/// How [`run_eval`] runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalOptions {
    /// Samples per problem (k).
    pub samples: usize,
    /// Template, limits, seed, dispatch policy, entropy recording.
    pub schedule: ScheduleConfig,
}

/// What [`run_eval`] returns.
#[derive(Debug, Clone)]
pub struct EvalRun {
    /// The metrics.
    pub report: EvalReport,
    /// Every trajectory, prompt-major.
    pub trajectories: Vec<Trajectory>,
    /// Rollout counters (turns, sampled tokens, tool calls, wall time).
    pub stats: RolloutStats,
    /// The dispatcher's counters.
    pub dispatch: DispatchStats,
    /// The generators' names.
    pub engines: Vec<String>,
    /// Per generator, the turns it wrote.
    pub turns_per_engine: Vec<usize>,
}

/// Rolls out `options.samples` samples of every prompt over `generators` with tool calls on
/// `tools`, and computes the report. Blocking: runs on a tokio runtime of its own.
///
/// # Errors
/// [`Error::EvalConfig`] for zero samples or no generator, [`Error::Problem`] for a
/// ground truth the verifier cannot score, and the errors of
/// [`run_scheduled`].
pub fn run_eval<T>(
    generators: Vec<Arc<dyn TurnGenerator>>,
    tokenizer: T,
    tools: Arc<dyn AsyncTools>,
    prompts: &[Prompt],
    options: &EvalOptions,
) -> Result<EvalRun, Error>
where
    T: TextTokenizer + Clone + Send + 'static,
{
    run_eval_with_progress(generators, tokenizer, tools, prompts, options, None)
}

/// [`run_eval`], calling `progress` as rollouts finish (the CLI draws its progress bar with it).
///
/// # Errors
/// Those of [`run_eval`].
pub fn run_eval_with_progress<T>(
    generators: Vec<Arc<dyn TurnGenerator>>,
    tokenizer: T,
    tools: Arc<dyn AsyncTools>,
    prompts: &[Prompt],
    options: &EvalOptions,
    progress: Option<ProgressFn>,
) -> Result<EvalRun, Error>
where
    T: TextTokenizer + Clone + Send + 'static,
{
    if options.samples == 0 {
        return Err(Error::EvalConfig {
            field: "samples".into(),
            message: "must be at least 1".into(),
        });
    }
    if generators.is_empty() {
        return Err(Error::EvalConfig {
            field: "engines".into(),
            message: "must be at least 1".into(),
        });
    }
    let engines: Vec<String> = generators.iter().map(|g| g.name()).collect();
    let out = crate::scheduled::runtime()?.block_on(run_scheduled(
        generators,
        tokenizer,
        tools,
        prompts,
        options.samples,
        &options.schedule,
        progress,
    ));
    let out = out?;
    let report = EvalReport::from_trajectories(&out.rollout.trajectories)?;
    Ok(EvalRun {
        report,
        trajectories: out.rollout.trajectories,
        stats: out.rollout.stats,
        dispatch: out.dispatch,
        engines,
        turns_per_engine: out.turns_per_engine,
    })
}

/// A named evaluation protocol (`rstar eval --preset`): the budget, turns, samples and sampling
/// an evaluation uses unless flags override them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalProtocol {
    /// The preset's name.
    pub name: String,
    /// Samples per problem (k of avg@k and pass@k).
    pub samples: usize,
    /// Response budget in tokens (assistant and tool tokens together).
    pub max_response_tokens: usize,
    /// Most assistant turns.
    pub max_assistant_turns: usize,
    /// Sampling temperature.
    pub temperature: f32,
    /// Nucleus sampling mass (`None`: off).
    pub top_p: Option<f32>,
}

impl EvalProtocol {
    /// The paper's benchmarks as the reference evaluates them (`examples/aime_eval.sh` in
    /// microsoft/rStar: `data.max_response_length=30720`, `val_kwargs.n=16`): 30 720 response
    /// tokens, 16 samples a problem for avg@16 and pass@k; the turn limit of the last stage of
    /// `rstar_curriculum::CurriculumConfig::rstar2_agent` (15, a test keeps them equal);
    /// temperature 1.0 (the rollout temperature: the script does not set one) and no top-p.
    pub fn rstar2_agent() -> Self {
        EvalProtocol {
            name: "rstar2-agent".into(),
            samples: 16,
            max_response_tokens: 30_720,
            max_assistant_turns: 15,
            temperature: 1.0,
            top_p: None,
        }
    }

    /// A protocol by name: `rstar2-agent`.
    ///
    /// # Errors
    /// [`Error::EvalConfig`] naming `preset` for another name.
    pub fn by_name(name: &str) -> Result<Self, Error> {
        match name {
            "rstar2-agent" | "rstar2_agent" => Ok(Self::rstar2_agent()),
            other => Err(Error::EvalConfig {
                field: "preset".into(),
                message: format!("is `{other}`, expected `rstar2-agent`"),
            }),
        }
    }
}

/// `summary.json`: the summary, what was run and how fast.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalSummaryFile {
    /// The headline numbers.
    pub summary: EvalSummary,
    /// The options of the run.
    pub options: EvalOptions,
    /// The model (a directory or a server URL) as given.
    pub model: String,
    /// The dataset as given.
    pub data: String,
    /// The generators' names.
    pub engines: Vec<String>,
    /// Per generator, the turns it wrote.
    pub turns_per_engine: Vec<usize>,
    /// Rollout counters.
    pub stats: RolloutStats,
    /// Sampled tokens per second of wall time.
    pub tokens_per_sec: f64,
    /// The dispatcher's counters.
    pub dispatch: DispatchStats,
    /// The sampler of every turn (absent in older files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<Sampling>,
    /// The protocol the run started from (`--preset`), before flags overrode it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<EvalProtocol>,
}

impl EvalSummaryFile {
    /// The file's contents for `run`.
    pub fn new(run: &EvalRun, options: &EvalOptions, model: &str, data: &str) -> Self {
        EvalSummaryFile {
            summary: run.report.summary.clone(),
            options: options.clone(),
            model: model.to_string(),
            data: data.to_string(),
            engines: run.engines.clone(),
            turns_per_engine: run.turns_per_engine.clone(),
            stats: run.stats,
            tokens_per_sec: run.stats.tokens_per_sec(),
            dispatch: run.dispatch.clone(),
            sampling: None,
            protocol: None,
        }
    }
}

/// The three files [`write_outputs`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputPaths {
    /// One [`ProblemResult`] a line.
    pub results: PathBuf,
    /// One [`Trajectory`] a line.
    pub trajectories: PathBuf,
    /// [`EvalSummaryFile`].
    pub summary: PathBuf,
}

/// Writes `results.jsonl`, `trajectories.jsonl` and `summary.json` into `dir` (created if
/// missing).
///
/// # Errors
/// [`Error::Io`] naming the file that could not be written.
pub fn write_outputs(
    dir: &Path,
    run: &EvalRun,
    summary: &EvalSummaryFile,
) -> Result<OutputPaths, Error> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io(IoError::new(path, source))
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let paths = OutputPaths {
        results: dir.join("results.jsonl"),
        trajectories: dir.join("trajectories.jsonl"),
        summary: dir.join("summary.json"),
    };
    write_jsonl(&paths.results, &run.report.problems)?;
    write_jsonl(&paths.trajectories, &run.trajectories)?;
    let mut text = serde_json::to_string_pretty(summary)?;
    text.push('\n');
    std::fs::write(&paths.summary, text).map_err(io(&paths.summary))?;
    Ok(paths)
}

fn write_jsonl<S: Serialize>(path: &Path, rows: &[S]) -> Result<(), Error> {
    let io = |source| Error::Io(IoError::new(path.to_path_buf(), source));
    let file = std::fs::File::create(path).map_err(io)?;
    let mut w = std::io::BufWriter::new(file);
    for row in rows {
        serde_json::to_writer(&mut w, row)?;
        w.write_all(b"\n").map_err(io)?;
    }
    w.flush().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_ks_are_powers_of_two_then_n() {
        assert_eq!(reported_ks(0), Vec::<usize>::new());
        assert_eq!(reported_ks(1), vec![1]);
        assert_eq!(reported_ks(4), vec![1, 2, 4]);
        assert_eq!(reported_ks(6), vec![1, 2, 4, 6]);
    }

    #[test]
    fn the_rstar2_agent_protocol_is_the_reference_evaluation_budget() {
        // examples/aime_eval.sh: 30 720 response tokens, 16 samples; 15 turns as the last stage.
        let p = EvalProtocol::by_name("rstar2-agent").unwrap();
        assert_eq!(
            (p.max_response_tokens, p.max_assistant_turns, p.samples),
            (30_720, 15, 16)
        );
        assert_eq!((p.temperature, p.top_p), (1.0, None));
        // The same turn limit as the curriculum's last stage (a dev-dependency: the crate
        // itself needs nothing of the curriculum).
        let last = rstar_curriculum::CurriculumConfig::rstar2_agent()
            .stages
            .last()
            .map(|s| s.max_assistant_turns as usize);
        assert_eq!(last, Some(p.max_assistant_turns));
        let err = EvalProtocol::by_name("tiny").unwrap_err().to_string();
        assert!(err.contains("preset"), "{err}");
    }

    #[test]
    fn pass_at_k_by_hand() {
        // n=4, c=1, k=2: 1 − C(3,2)/C(4,2) = 1 − 3/6.
        assert!((pass_at_k(4, 1, 2) - 0.5).abs() < 1e-12);
        // n=10, c=3, k=3: 1 − C(7,3)/C(10,3) = 1 − 35/120.
        assert!((pass_at_k(10, 3, 3) - 85.0 / 120.0).abs() < 1e-12);
        assert_eq!(pass_at_k(4, 0, 2), 0.0);
        assert_eq!(pass_at_k(4, 4, 1), 1.0);
        assert_eq!(pass_at_k(4, 3, 2), 1.0);
    }
}
