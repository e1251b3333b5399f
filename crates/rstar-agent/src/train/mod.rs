//! The trainer: SFT on the embedded default, then staged GRPO-RoC, with held-out evaluation
//! after SFT and after each stage (`rstar train`, `cargo xtask train`).
//!
//! [`run`] does the whole recipe from a [`TrainConfig`] and writes its artefacts to a run
//! directory; [`resume`] continues a run from its last checkpoint:
//!
//! | file | content |
//! |---|---|
//! | `config.json` | the resolved config |
//! | `sft_corpus.jsonl` | the SFT demonstrations (real tool outputs) |
//! | `sft_metrics.jsonl` | one [`sft::SftStep`] a line |
//! | `metrics.jsonl` | one [`rl::StepRecord`] a line, with the curriculum's decision |
//! | `eval.jsonl` | one [`EvalRow`] a line: after SFT and after each stage |
//! | `samples.jsonl` | held-out trajectories of the final policy (`rstar show` reads them; with `record_entropy`, `rstar analyze entropy` too) |
//! | `plots/*.svg` | the RL metrics over steps with stage boundaries ([`plots`]) |
//! | `tb/events.out.tfevents.*` | TensorBoard events of every metrics line, evaluation and a few rollouts ([`crate::analysis::tensorboard`]) |
//! | `checkpoints/<phase>/` | the policy after SFT and after each stage (`rstar_policy::save_dir`) |
//! | `checkpoints/last/` | the resumable state after the last SFT or RL step ([`checkpoint`]) |
//!
//! A resumed run continues bit for bit: the policy and AdamW's state are saved exactly, the SFT
//! batch generator is fast-forwarded, each RL step draws from a generator seeded by the step
//! number, the curriculum's state and the hard stage's problems are saved, and metrics lines
//! written after the checkpoint are dropped. Killing the process loses at most the current step.
//!
//! The building blocks are public: [`rollout`](crate::rollout) for batched episodes,
//! [`sft`] for the corpus and the SFT loop, [`rl::step`] for one GRPO-RoC step, [`evaluate`].

pub mod checkpoint;
pub mod config;
pub mod engines;
pub mod optim;
mod phases;
pub mod rl;
pub mod sft;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use burn::tensor::Device;
use rstar_policy::{Qwen, Sampling, Tokenizer};
use rstar_toolenv::{BlockingPool, Pool};
use serde::{Deserialize, Serialize};

pub use rstar_analysis::plots;

pub use config::{
    Engines, EvalOptions, LrSchedule, PublishVia, RlOptions, RocMode, RocOptions, RolloutDriver,
    SftOptions, ToolOptions, TrainConfig,
};

use self::checkpoint::Phase;
use crate::episode::{Limits, Trajectory};
use crate::error::AgentError;
use crate::eval::{EvalReport, EvalSummary};
use crate::rollout::{Prompt, RolloutConfig, ToolExecutor, TrajectoryStats, mix_seed, rollout};
use crate::tasks::{Split, TaskSet};
use crate::template::TemplateFormat;

/// The lines of `eval.jsonl`: defined in `rstar-analysis`, which reads them back for the report.
pub use rstar_analysis::records::{EvalRow, SampledAt};

/// `greedy` or `T = 0.6`.
fn decoding_name(temperature: Option<f64>) -> String {
    temperature.map_or_else(|| "greedy".to_string(), |t| format!("T = {t}"))
}

/// What [`evaluate`] measured.
#[derive(Debug, Clone)]
pub struct Evaluation {
    /// Greedy decoding, one sample per problem.
    pub greedy: TrajectoryStats,
    /// `eval.samples` samples per problem at `eval.temperature`, when `eval.samples > 0`.
    pub sampled: Option<TrajectoryStats>,
    /// avg@k and pass@k of those samples, as `rstar eval` computes them.
    pub sampled_summary: Option<EvalSummary>,
    /// avg@k at each of `eval.more_temperatures`, when `eval.samples > 0`.
    pub more: Vec<SampledAt>,
    /// The greedy trajectories.
    pub trajectories: Vec<Trajectory>,
}

/// Evaluates `model` (a non-autodiff snapshot) on `prompts` with the compact template and
/// limits.
///
/// # Errors
/// Rollout errors.
pub fn evaluate(
    model: &Qwen,
    tokenizer: &Tokenizer,
    prompts: &[Prompt],
    options: &EvalOptions,
    seed: u64,
    executor: &mut dyn ToolExecutor,
) -> Result<Evaluation, AgentError> {
    evaluate_with(
        TemplateFormat::Compact,
        model,
        tokenizer,
        prompts,
        options,
        seed,
        executor,
    )
}

/// [`evaluate`] in a given template (with its [`rl::base_limits`], the response budget replaced
/// by `options.max_response_tokens` when set).
///
/// # Errors
/// Rollout errors.
pub fn evaluate_with(
    template: TemplateFormat,
    model: &Qwen,
    tokenizer: &Tokenizer,
    prompts: &[Prompt],
    options: &EvalOptions,
    seed: u64,
    executor: &mut dyn ToolExecutor,
) -> Result<Evaluation, AgentError> {
    let base = rl::base_limits(template);
    let config = RolloutConfig {
        template,
        limits: Limits {
            max_response_tokens: options
                .max_response_tokens
                .unwrap_or(base.max_response_tokens),
            ..base
        },
        sampling: Sampling::Greedy,
        seed,
        max_batch: options.max_batch,
        eos: Vec::new(),
        per_rollout_seeds: false,
    };
    let sample = |temperature: f64, executor: &mut dyn ToolExecutor| {
        let config = RolloutConfig {
            sampling: Sampling::Temperature {
                temperature: temperature as f32,
            },
            ..config.clone()
        };
        rollout(
            model,
            tokenizer,
            prompts,
            options.samples,
            &config,
            executor,
        )
    };
    // With an executor that clones (`ToolExecutor::try_clone`), the greedy pass and `more_temperatures` run on this thread
    // and the samples at `eval.temperature` on a second one. Every rollout is seeded as
    // before, so the numbers are those of one pass after another.
    let run_here = |executor: &mut dyn ToolExecutor| {
        let greedy = rollout(model, tokenizer, prompts, 1, &config, executor);
        let mut more_out = Vec::new();
        if options.samples > 0 {
            for &temperature in &options.more_temperatures {
                more_out.push((temperature, sample(temperature, executor)));
            }
        }
        (greedy, more_out)
    };
    let parallel = {
        let clones = if options.samples > 0 {
            executor.try_clone().zip(executor.try_clone())
        } else {
            None
        };
        clones.map(|(mut here, mut there)| {
            std::thread::scope(|scope| {
                let sample = &sample;
                let handle = scope.spawn(move || sample(options.temperature, &mut *there));
                let (greedy, more_out) = run_here(&mut *here);
                let main_sampled = handle.join().expect("the evaluation thread does not panic");
                (greedy, Some(main_sampled), more_out)
            })
        })
    };
    let (greedy, main_sampled, mut more_out) = match parallel {
        Some(out) => out,
        None => {
            let (greedy, more_out) = run_here(executor);
            (greedy, None, more_out)
        }
    };
    let greedy = greedy?;
    let mut sampled = None;
    let mut sampled_summary = None;
    let mut more = Vec::new();
    if options.samples > 0 {
        let out = match main_sampled {
            Some(out) => out?,
            None => sample(options.temperature, executor)?,
        };
        sampled_summary = Some(EvalReport::from_trajectories(&out.trajectories)?.summary);
        sampled = Some(TrajectoryStats::of(&out.trajectories));
        for (temperature, out) in more_out.drain(..) {
            more.push(SampledAt {
                temperature,
                stats: TrajectoryStats::of(&out?.trajectories),
            });
        }
    }
    Ok(Evaluation {
        greedy: TrajectoryStats::of(&greedy.trajectories),
        sampled,
        sampled_summary,
        more,
        trajectories: greedy.trajectories,
    })
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainReport {
    /// The run directory.
    pub out: PathBuf,
    /// Evaluations after SFT and after each stage.
    pub evals: Vec<EvalRow>,
    /// RL steps done.
    pub rl_steps: u64,
    /// SFT steps per second.
    pub sft_steps_per_sec: f64,
    /// Mean RL step time in seconds.
    pub rl_step_secs: f64,
    /// Mean rollout throughput over RL steps (sampled tokens per second of generation).
    pub rollout_tokens_per_sec: f64,
    /// Seconds this invocation took (a resumed run counts from the resume).
    pub total_secs: f64,
    /// Whether every stage is done (false when stopped early by [`RunOptions`]).
    #[serde(default = "yes")]
    pub finished: bool,
    /// The sampling temperature of the avg@k evaluations (`eval.temperature`).
    #[serde(default = "one")]
    pub eval_temperature: f64,
}

fn yes() -> bool {
    true
}

fn one() -> f64 {
    1.0
}

impl TrainReport {
    /// The final table, one row after SFT and after each stage: held-out accuracy under
    /// greedy decoding and avg@k at every evaluated temperature (`eval.more_temperatures`,
    /// then `eval.temperature`, the rollouts'), the best of these, then the tool columns
    /// (calls per trace, tool error rate, the same in successful traces, truncation) of the
    /// avg@k at `eval.temperature`, or of the greedy evaluation when `eval.samples` is 0.
    /// A last line states the SFT policy's best decoding next to the final policy's and the
    /// gain between them, the headline: RL must beat SFT at its best, not at one temperature.
    pub fn table(&self) -> String {
        let k = self
            .evals
            .iter()
            .find_map(|e| e.sampled.map(|s| s.count / e.greedy.count.max(1)))
            .map_or_else(|| "k".to_string(), |k| k.to_string());
        // The extra temperatures ascending, then the rollouts'.
        let mut temps: Vec<f64> = Vec::new();
        for m in self.evals.iter().flat_map(|e| &e.more) {
            if !temps.contains(&m.temperature) && m.temperature != self.eval_temperature {
                temps.push(m.temperature);
            }
        }
        temps.sort_by(f64::total_cmp);
        temps.push(self.eval_temperature);
        let mut s = String::from("| phase | RL steps | greedy |");
        for t in &temps {
            s.push_str(&format!(" avg@{k} (T = {t}) |"));
        }
        s.push_str(" best | tool calls | tool error rate | in successes | truncated |\n|");
        s.push_str(&"---|".repeat(temps.len() + 8));
        s.push('\n');
        let pct = |x: f64| format!("{:.1}%", 100.0 * x);
        for e in &self.evals {
            let t = e.sampled.as_ref().unwrap_or(&e.greedy);
            s.push_str(&format!(
                "| {} | {} | {} |",
                e.phase,
                e.rl_steps,
                pct(e.greedy.accuracy)
            ));
            for &temp in &temps {
                let at = e
                    .decodings(self.eval_temperature)
                    .into_iter()
                    .find(|d| d.0 == Some(temp))
                    .map(|d| d.1);
                s.push_str(&format!(" {} |", at.map_or_else(|| "-".to_string(), pct)));
            }
            let (best_at, best) = e.best(self.eval_temperature);
            s.push_str(&format!(
                " {} ({}) | {:.2} | {} | {} | {} |\n",
                pct(best),
                decoding_name(best_at),
                t.tool_calls,
                pct(t.tool_error_rate),
                pct(t.tool_error_rate_success),
                pct(t.truncation_rate)
            ));
        }
        if let (Some(first), Some(last)) = (self.evals.first(), self.evals.last())
            && self.evals.len() > 1
        {
            let (a_at, a) = first.best(self.eval_temperature);
            let (b_at, b) = last.best(self.eval_temperature);
            s.push_str(&format!(
                "\nbest decoding: {} {} ({}), {} {} ({}): {:+.1} points\n",
                first.phase,
                pct(a),
                decoding_name(a_at),
                last.phase,
                pct(b),
                decoding_name(b_at),
                100.0 * (b - a)
            ));
        }
        s
    }
}

/// How to run besides the config: test hooks that stop after a number of steps (each one
/// checkpointed, as a kill would leave it), and, for [`resume`], the sandbox's interpreter and
/// workers (they do not change results, so a resumed run may use others).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunOptions {
    /// Return after this many SFT steps of the run (counted from its start, not the resume),
    /// as a kill would leave it: `checkpoints/last/` is the last one written
    /// (`checkpoint_every`).
    pub stop_after_sft_steps: Option<usize>,
    /// Return after this many RL steps of the run, as a kill would leave it.
    pub stop_after_rl_steps: Option<u64>,
    /// [`resume`]: the Python interpreter instead of the saved `tools.python`.
    pub python: Option<PathBuf>,
    /// [`resume`]: sandbox workers instead of the saved `tools.workers`.
    pub workers: Option<usize>,
    /// [`resume`]: code-judge servers instead of the saved `tools.servers` (empty: keep them).
    pub tool_servers: Vec<String>,
    /// The TensorBoard event directory [default: `<out>/tb`].
    pub tensorboard: Option<PathBuf>,
    /// [`resume`]: whether the checkpoint's digests are checked (`--no-verify` skips them; the
    /// weights are checked for NaN and infinities either way).
    pub verify: rstar_policy::Verify,
    /// [`resume`]: continue although `config.json` was edited since the checkpoint was
    /// written (`--resume-with-edited-config`); the edit is logged and appended to
    /// `config_edits.jsonl`. Refused otherwise.
    pub accept_edited_config: bool,
}

/// The config fields a resume may change without counting as an edit: where the sandbox's
/// Python is and how many workers or servers it has are the machine's, not the run's.
pub const RESUME_OVERRIDES: &[&str] = &["tools.python", "tools.workers", "tools.servers"];

/// What the trainer reports while it runs. [`LogLines`] turns every event into a log line;
/// the CLI's progress bars implement it too.
pub trait Observer {
    /// A progress message (corpus, evaluations, stages, checkpoints).
    fn log(&mut self, line: &str);
    /// An SFT step finished (`total` steps in all).
    fn sft_step(&mut self, step: &sft::SftStep, options: &SftOptions) {
        if sft_logged(step, options) {
            self.log(&sft_line(step, options.steps));
        }
    }
    /// An RL step finished (`total`: the curriculum's step budget, when it has one).
    fn rl_step(&mut self, record: &rl::StepRecord, total: Option<u64>) {
        let _ = total;
        self.log(&rl_line(record));
    }
}

/// An [`Observer`] that hands every line to a closure.
pub struct LogLines<F>(pub F);

impl<F> std::fmt::Debug for LogLines<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LogLines")
    }
}

impl<F: FnMut(&str)> Observer for LogLines<F> {
    fn log(&mut self, line: &str) {
        (self.0)(line);
    }
}

/// Whether an SFT step gets a log line: every `log_every` steps and the last one.
pub fn sft_logged(step: &sft::SftStep, options: &SftOptions) -> bool {
    options.log_every > 0
        && (step.step.is_multiple_of(options.log_every) || step.step == options.steps)
}

/// The log line of an SFT step.
pub fn sft_line(s: &sft::SftStep, total: usize) -> String {
    format!(
        "sft step {}/{}: loss {:.3}, lr {:.2e}, grad norm {:.2}, {:.2}s/step",
        s.step, total, s.loss, s.lr, s.grad_norm, s.secs
    )
}

/// The log line of an RL step. With the scheduled driver the tool calls overlap the turns
/// and each other: their summed time is said as such, not as a phase of the step.
pub fn rl_line(record: &rl::StepRecord) -> String {
    let phases = if record.dispatch.is_some() {
        format!(
            "rollout {:.1}s with {:.1}s of tool calls overlapping, update {:.1}s",
            record.time_rollout, record.time_tools, record.time_update
        )
    } else {
        format!(
            "rollout {:.1}s, tools {:.1}s, update {:.1}s",
            record.time_rollout, record.time_tools, record.time_update
        )
    };
    format!(
        "rl step {} [{}]: reward {:.3}, kept {} of {}, tool errors {:.1}% ({:.1}% in successes), clip {:.3}, kl {:.4}, entropy {:.3}, {:.1}s ({phases}) -> {}",
        record.step,
        record.stage_name,
        record.all.accuracy,
        record.kept.count,
        record.rollouts,
        100.0 * record.all.tool_error_rate,
        100.0 * record.all.tool_error_rate_success,
        record.clip_frac,
        record.ppo_kl,
        record.entropy,
        record.time_step,
        record.decision
    )
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> AgentError + '_ {
    move |source| AgentError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Starts the sandboxed Python pool the trainer runs every tool call in (no preloaded modules:
/// the embedded tasks need only the standard library).
///
/// # Errors
/// [`AgentError::Toolenv`] when the interpreter or the sandbox cannot start.
pub fn start_pool(options: &ToolOptions) -> Result<BlockingPool, AgentError> {
    let mut builder = Pool::builder()
        .python(&options.python)
        .timeout(Duration::from_secs_f64(options.timeout_secs))
        .preload(Vec::<String>::new());
    if options.workers > 0 {
        builder = builder.workers(options.workers);
    }
    Ok(BlockingPool::new(builder)?)
}

/// Seeds of the run's independent streams.
fn seed_of(seed: u64, stream: &str) -> u64 {
    stream.bytes().fold(seed, |s, b| mix_seed(s, u64::from(b)))
}

/// The held-out problems and the RL pool of a run.
fn problems(config: &TrainConfig) -> Result<(Vec<Prompt>, Vec<Prompt>), AgentError> {
    if let Some(path) = &config.data {
        return data_problems(config, path);
    }
    let tasks = TaskSet::new(config.tasks.clone())?;
    let seed = config.seed;
    let held_out = tasks
        .generate(
            Split::HeldOut,
            config.eval.problems,
            seed_of(seed, "eval-tasks"),
        )?
        .iter()
        .map(Prompt::from)
        .collect();
    let rl_pool = tasks
        .generate(Split::Train, config.rl.pool_size, seed_of(seed, "rl-tasks"))?
        .iter()
        .map(Prompt::from)
        .collect();
    Ok((held_out, rl_pool))
}

/// The held-out problems and the RL pool of `--data FILE` ([`crate::dataset::load_prompts`]):
/// the problems in an order shuffled with the run's seed, the first `eval.problems` held out,
/// the next `rl.pool_size` (or fewer) the RL pool.
fn data_problems(
    config: &TrainConfig,
    path: &Path,
) -> Result<(Vec<Prompt>, Vec<Prompt>), AgentError> {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    let mut prompts = crate::dataset::load_prompts(path)?;
    let held = config.eval.problems;
    if prompts.len() <= held {
        return Err(AgentError::TrainConfig {
            field: "data".into(),
            message: format!(
                "is {} with {} problems: `eval.problems` holds out {held}, which leaves none to train on",
                path.display(),
                prompts.len()
            ),
        });
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed_of(config.seed, "data-split"));
    prompts.shuffle(&mut rng);
    let rest = prompts.split_off(held);
    Ok((
        prompts,
        rest.into_iter().take(config.rl.pool_size).collect(),
    ))
}

/// The template of a tokenizer: compact for the built-in character tokenizer, ChatML for HF.
pub fn template_for(tokenizer: &Tokenizer) -> TemplateFormat {
    match tokenizer {
        Tokenizer::Hf(_) => TemplateFormat::ChatMl,
        Tokenizer::Char(_) => TemplateFormat::Compact,
    }
}

/// Runs the whole recipe (SFT, evaluation, the curriculum's RL stages with an evaluation after
/// each) and writes the artefacts to `out`. `log` receives progress lines.
///
/// # Errors
/// A bad config (named field), IO errors naming the file, sandbox start-up, demonstration,
/// rollout and loss errors.
pub fn run(
    config: &TrainConfig,
    out: &Path,
    device: &Device,
    log: impl FnMut(&str),
) -> Result<TrainReport, AgentError> {
    run_with(
        config,
        out,
        device,
        &RunOptions::default(),
        &mut LogLines(log),
    )
}

/// [`run`] with test hooks and an [`Observer`]. A previous run's resumable checkpoint in
/// `out` is removed first.
///
/// # Errors
/// As [`run`].
pub fn run_with(
    config: &TrainConfig,
    out: &Path,
    device: &Device,
    options: &RunOptions,
    observer: &mut dyn Observer,
) -> Result<TrainReport, AgentError> {
    config.validate()?;
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let config_path = out.join("config.json");
    std::fs::write(&config_path, serde_json::to_string_pretty(config)? + "\n")
        .map_err(io_err(&config_path))?;
    let last = checkpoint::dir_of(out);
    for suffix in ["", ".tmp", ".old"] {
        let mut name = last.as_os_str().to_os_string();
        name.push(suffix);
        let dir = PathBuf::from(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(io_err(&dir))?;
        }
    }
    phases::train(config, out, device, None, options, observer)
}

/// Reads the resolved config of a run directory (`<run>/config.json`).
///
/// # Errors
/// [`AgentError::Resume`] when `run` has no `config.json`; [`TrainConfig::from_json_file`]'s
/// errors.
pub fn run_config(run: &Path) -> Result<TrainConfig, AgentError> {
    let path = run.join("config.json");
    if !path.is_file() {
        return Err(AgentError::Resume {
            path: run.to_path_buf(),
            message: "has no config.json: not a run directory".into(),
        });
    }
    TrainConfig::from_json_file(&path)
}

/// Continues the run in `run` from its last checkpoint with the config saved there. A finished
/// run is reported (and logged as such) without training.
///
/// # Errors
/// [`AgentError::Resume`] naming the path when there is no config or no checkpoint; then
/// [`run`]'s errors.
pub fn resume(
    run: &Path,
    device: &Device,
    options: &RunOptions,
    observer: &mut dyn Observer,
) -> Result<TrainReport, AgentError> {
    let started = Instant::now();
    let mut config = run_config(run)?;
    if let Some(python) = &options.python {
        config.tools.python = python.clone();
    }
    if let Some(workers) = options.workers {
        config.tools.workers = workers;
    }
    if !options.tool_servers.is_empty() {
        config.tools.servers = options.tool_servers.clone();
    }
    let Some(found) = checkpoint::find_sound(run, options.verify)? else {
        return Err(AgentError::Resume {
            path: checkpoint::dir_of(run),
            message: "no checkpoint to resume from (the run ended before its first step, or was written by a trainer without resumable checkpoints)".into(),
        });
    };
    let checkpoint::Found {
        dir,
        state,
        fallback,
    } = found;
    if let Some(why) = fallback {
        // Kept aside for inspection; the next save must not rotate it into `last.old/` over
        // the sound checkpoint this run goes on from.
        let last = checkpoint::dir_of(run);
        let aside = last.with_file_name("last.unsound");
        if aside.exists() {
            std::fs::remove_dir_all(&aside).map_err(io_err(&aside))?;
        }
        std::fs::rename(&last, &aside).map_err(io_err(&last))?;
        observer.log(&format!(
            "warning: {} is unsound ({why}); resuming from the previous checkpoint {} (the unsound one is kept as {})",
            last.display(),
            dir.display(),
            aside.display()
        ));
    }
    check_config_unedited(run, &config, &state, options, observer)?;
    if state.phase == Phase::Finished {
        observer.log(&format!(
            "the run in {} is already finished ({} SFT steps, {} RL steps): nothing to resume",
            run.display(),
            state.sft_steps,
            state.rl_steps
        ));
        return report_from_files(run, started, true, config.eval.temperature);
    }
    observer.log(&format!(
        "resuming {} from {} after {} SFT steps and {} RL steps",
        run.display(),
        dir.display(),
        state.sft_steps,
        state.rl_steps
    ));
    phases::train(&config, run, device, Some((dir, state)), options, observer)
}

/// Refuses a resume whose `config.json` differs from the config the checkpoint was written
/// with (but for [`RESUME_OVERRIDES`]), unless `options.accept_edited_config`: then the
/// edit is logged and appended to `config_edits.jsonl`.
fn check_config_unedited(
    run: &Path,
    config: &TrainConfig,
    state: &checkpoint::ResumeState,
    options: &RunOptions,
    observer: &mut dyn Observer,
) -> Result<(), AgentError> {
    let Some(saved) = &state.run_config else {
        return Ok(());
    };
    let now = serde_json::to_value(config)?;
    let changed = checkpoint::json_differences(saved, &now, RESUME_OVERRIDES);
    if changed.is_empty() {
        return Ok(());
    }
    let list = changed.join(", ");
    if !options.accept_edited_config {
        return Err(AgentError::Resume {
            path: run.join("config.json"),
            message: format!(
                "was edited since the checkpoint was written ({list}): restore it, or pass --resume-with-edited-config to continue with the edit (it is recorded in config_edits.jsonl)"
            ),
        });
    }
    observer.log(&format!(
        "warning: resuming with an edited config.json (--resume-with-edited-config): {list}"
    ));
    let path = run.join("config_edits.jsonl");
    let line = serde_json::json!({
        "sft_steps": state.sft_steps,
        "rl_steps": state.rl_steps,
        "changed": changed,
    });
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(io_err(&path))?;
    std::io::Write::write_all(&mut file, format!("{line}\n").as_bytes()).map_err(io_err(&path))?;
    Ok(())
}

/// Reads the run's JSONL files back into a report.
fn report_from_files(
    out: &Path,
    started: Instant,
    finished: bool,
    eval_temperature: f64,
) -> Result<TrainReport, AgentError> {
    fn read<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Vec<T>, AgentError> {
        if !path.exists() {
            return Ok(Vec::new());
        }
        let text = std::fs::read_to_string(path).map_err(io_err(path))?;
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str(l).map_err(|e| AgentError::Dataset {
                    path: path.to_path_buf(),
                    line: i + 1,
                    message: e.to_string(),
                })
            })
            .collect()
    }
    let evals: Vec<EvalRow> = read(&out.join("eval.jsonl"))?;
    let sft: Vec<sft::SftStep> = read(&out.join("sft_metrics.jsonl"))?;
    let steps: Vec<rl::StepRecord> = read(&out.join("metrics.jsonl"))?;
    let mean = |v: &mut dyn Iterator<Item = f64>| {
        let (sum, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
        if n == 0 { 0.0 } else { sum / n as f64 }
    };
    let sft_secs: f64 = sft.iter().map(|s| s.secs).sum();
    Ok(TrainReport {
        out: out.to_path_buf(),
        evals,
        rl_steps: steps.len() as u64,
        sft_steps_per_sec: if sft_secs > 0.0 {
            sft.len() as f64 / sft_secs
        } else {
            0.0
        },
        rl_step_secs: mean(&mut steps.iter().map(|s| s.time_step)),
        rollout_tokens_per_sec: mean(&mut steps.iter().map(|s| s.rollout_tokens_per_sec)),
        total_secs: started.elapsed().as_secs_f64(),
        finished,
        eval_temperature,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(count: usize, accuracy: f64, errors: f64, in_successes: f64) -> TrajectoryStats {
        TrajectoryStats {
            count,
            accuracy,
            tool_calls: 1.5,
            tool_error_rate: errors,
            tool_error_rate_success: in_successes,
            ..TrajectoryStats::default()
        }
    }

    fn row(phase: &str, greedy: f64, sampled: Option<f64>, at_06: Option<f64>) -> EvalRow {
        EvalRow {
            phase: phase.into(),
            rl_steps: 0,
            greedy: stats(100, greedy, 0.0, 0.0),
            sampled: sampled.map(|a| stats(400, a, 0.222, 0.089)),
            avg_at_k: sampled,
            pass_at_k: Vec::new(),
            more: at_06
                .map(|a| SampledAt {
                    temperature: 0.6,
                    stats: stats(400, a, 0.1, 0.0),
                })
                .into_iter()
                .collect(),
        }
    }

    fn report(evals: Vec<EvalRow>) -> TrainReport {
        TrainReport {
            out: PathBuf::from("runs/x"),
            evals,
            rl_steps: 0,
            sft_steps_per_sec: 0.0,
            rl_step_secs: 0.0,
            rollout_tokens_per_sec: 0.0,
            total_secs: 0.0,
            finished: true,
            eval_temperature: 0.8,
        }
    }

    #[test]
    fn the_table_shows_every_decoding_and_the_gain_over_the_sft_best() {
        // 400 sampled traces of 100 problems: avg@4; the tool columns are those at T = 0.8.
        let mut last = row("stage hard", 0.9, Some(0.85), Some(0.93));
        last.rl_steps = 32;
        let table = report(vec![row("sft", 0.51, Some(0.4), Some(0.55)), last]).table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0],
            "| phase | RL steps | greedy | avg@4 (T = 0.6) | avg@4 (T = 0.8) | best | tool calls | tool error rate | in successes | truncated |"
        );
        assert_eq!(lines[1], "|---|---|---|---|---|---|---|---|---|---|");
        assert_eq!(
            lines[2],
            "| sft | 0 | 51.0% | 55.0% | 40.0% | 55.0% (T = 0.6) | 1.50 | 22.2% | 8.9% | 0.0% |"
        );
        assert_eq!(
            lines[3],
            "| stage hard | 32 | 90.0% | 93.0% | 85.0% | 93.0% (T = 0.6) | 1.50 | 22.2% | 8.9% | 0.0% |"
        );
        assert_eq!(
            lines[5],
            "best decoding: sft 55.0% (T = 0.6), stage hard 93.0% (T = 0.6): +38.0 points"
        );
        // Greedy wins ties and when it is best.
        let table = report(vec![
            row("sft", 0.6, Some(0.4), Some(0.6)),
            row("x", 0.5, Some(0.5), None),
        ])
        .table();
        assert!(
            table.contains("best decoding: sft 60.0% (greedy), x 50.0% (greedy): -10.0 points"),
            "{table}"
        );
        assert!(
            table.contains("| x | 0 | 50.0% | - | 50.0% | 50.0% (greedy) |"),
            "{table}"
        );
    }

    #[test]
    fn without_samples_the_table_shows_greedy_tool_errors() {
        let table = report(vec![row("sft", 0.99, None, None)]).table();
        assert!(
            table.starts_with("| phase | RL steps | greedy | avg@k (T = 0.8) | best |"),
            "{table}"
        );
        assert!(
            table.contains("| sft | 0 | 99.0% | - | 99.0% (greedy) | 1.50 | 0.0% | 0.0% | 0.0% |"),
            "{table}"
        );
        assert!(!table.contains("best decoding"), "{table}");
    }
}
