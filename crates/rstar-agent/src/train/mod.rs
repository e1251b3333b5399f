//! The trainer: SFT on the embedded default, then staged GRPO-RoC, with held-out evaluation
//! after SFT and after each stage (`rstar train`, `cargo xtask train`).
//!
//! [`run`] does the whole recipe from a [`TrainConfig`] and writes its artefacts to a run
//! directory:
//!
//! | file | content |
//! |---|---|
//! | `config.json` | the resolved config |
//! | `sft_corpus.jsonl` | the SFT demonstrations (real tool outputs) |
//! | `sft_metrics.jsonl` | one [`sft::SftStep`] a line |
//! | `metrics.jsonl` | one [`rl::StepRecord`] a line, with the curriculum's decision |
//! | `eval.jsonl` | one [`EvalRow`] a line: after SFT and after each stage |
//! | `samples.jsonl` | held-out trajectories of the final policy (`rstar show` reads them) |
//! | `checkpoints/<phase>/` | the policy after SFT and after each stage (`rstar_policy::save_dir`) |
//!
//! The building blocks are public: [`rollout`](crate::rollout) for batched episodes,
//! [`sft`] for the corpus and the SFT loop, [`rl::step`] for one GRPO-RoC step, [`evaluate`].
//!
//! It is **not** (yet) resumable, and only trains the embedded character model from scratch;
//! see `docs/training.md` for what is missing.

pub mod config;
pub mod optim;
pub mod rl;
pub mod sft;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use burn::module::Module;
use burn::tensor::Device;
use rstar_curriculum::{Curriculum, Decision, ProblemSet, StepMetrics};
use rstar_policy::{Qwen, Sampling, Tokenizer, WeightDtype, save_dir};
use rstar_toolenv::{BlockingPool, Pool};
use serde::{Deserialize, Serialize};

pub use config::{EvalOptions, LrSchedule, RlOptions, SftOptions, ToolOptions, TrainConfig};

use crate::episode::{Limits, Trajectory};
use crate::error::AgentError;
use crate::rollout::{
    PoolExecutor, Prompt, RolloutConfig, ToolExecutor, TrajectoryStats, mix_seed, rollout,
};
use crate::tasks::{Split, TaskSet};
use crate::template::TemplateFormat;

/// Held-out evaluation of one policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRow {
    /// `sft` or `stage <name>`.
    pub phase: String,
    /// RL steps done when evaluated.
    pub rl_steps: u64,
    /// Greedy decoding, one sample per problem.
    pub greedy: TrajectoryStats,
    /// Temperature-1 avg@k, when `eval.samples > 0`.
    pub sampled: Option<TrajectoryStats>,
}

/// Evaluates `model` (a non-autodiff snapshot) on `prompts` with the compact limits.
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
) -> Result<(TrajectoryStats, Option<TrajectoryStats>, Vec<Trajectory>), AgentError> {
    let mut config = RolloutConfig {
        template: TemplateFormat::Compact,
        limits: Limits::compact(),
        sampling: Sampling::Greedy,
        seed,
        max_batch: options.max_batch,
        eos: Vec::new(),
    };
    let greedy = rollout(model, tokenizer, prompts, 1, &config, executor)?;
    let sampled = if options.samples > 0 {
        config.sampling = Sampling::Temperature { temperature: 1.0 };
        let out = rollout(
            model,
            tokenizer,
            prompts,
            options.samples,
            &config,
            executor,
        )?;
        Some(TrajectoryStats::of(&out.trajectories))
    } else {
        None
    };
    Ok((
        TrajectoryStats::of(&greedy.trajectories),
        sampled,
        greedy.trajectories,
    ))
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
    /// Seconds the whole run took.
    pub total_secs: f64,
}

impl TrainReport {
    /// The final table: held-out accuracy and tool error rate after SFT and each stage.
    pub fn table(&self) -> String {
        let mut s = String::from(
            "| phase | RL steps | held-out acc (greedy) | avg@k | tool calls | tool error rate | in successes | truncated |\n|---|---|---|---|---|---|---|---|\n",
        );
        for e in &self.evals {
            let g = &e.greedy;
            let k = e
                .sampled
                .map(|s| format!("{:.1}%", 100.0 * s.accuracy))
                .unwrap_or_else(|| "-".into());
            s.push_str(&format!(
                "| {} | {} | {:.1}% | {} | {:.2} | {:.1}% | {:.1}% | {:.1}% |\n",
                e.phase,
                e.rl_steps,
                100.0 * g.accuracy,
                k,
                g.tool_calls,
                100.0 * g.tool_error_rate,
                100.0 * g.tool_error_rate_success,
                100.0 * g.truncation_rate
            ));
        }
        s
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> AgentError + '_ {
    move |source| AgentError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Appends JSON lines to a file.
struct JsonLines {
    path: PathBuf,
    file: std::fs::File,
}

impl JsonLines {
    fn create(path: PathBuf) -> Result<Self, AgentError> {
        let file = std::fs::File::create(&path).map_err(io_err(&path))?;
        Ok(JsonLines { path, file })
    }
    fn push(&mut self, value: &impl Serialize) -> Result<(), AgentError> {
        let line = serde_json::to_string(value)?;
        writeln!(self.file, "{line}").map_err(io_err(&self.path))?;
        self.file.flush().map_err(io_err(&self.path))
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
    mut log: impl FnMut(&str),
) -> Result<TrainReport, AgentError> {
    let started = Instant::now();
    config.validate()?;
    std::fs::create_dir_all(out).map_err(io_err(out))?;
    let config_path = out.join("config.json");
    std::fs::write(&config_path, serde_json::to_string_pretty(config)? + "\n")
        .map_err(io_err(&config_path))?;

    let pool = start_pool(&config.tools)?;
    let mut tools = PoolExecutor {
        pool: &pool,
        timeout: None,
    };
    let tokenizer = Tokenizer::char();
    let tasks = TaskSet::new(config.tasks.clone())?;
    let seed = config.seed;

    // SFT corpus with real tool outputs.
    let t0 = Instant::now();
    let sft_tasks = tasks.generate(
        Split::Train,
        config.sft.corpus_size,
        seed_of(seed, "sft-tasks"),
    )?;
    let demos = sft::build_demonstrations(
        &sft_tasks,
        &Limits::compact(),
        config.sft.failing_fraction,
        seed_of(seed, "sft-bugs"),
        &mut tools,
    )?;
    crate::tasks::sft::write_corpus(&out.join("sft_corpus.jsonl"), &demos)?;
    let rows = sft::tokenize(&demos, &tokenizer);
    log(&format!(
        "sft corpus: {} demonstrations ({} with a failing first call), tool outputs in {:.1}s",
        demos.len(),
        demos.iter().filter(|d| d.bug.is_some()).count(),
        t0.elapsed().as_secs_f64()
    ));

    let held_out: Vec<Prompt> = tasks
        .generate(
            Split::HeldOut,
            config.eval.problems,
            seed_of(seed, "eval-tasks"),
        )?
        .iter()
        .map(Prompt::from)
        .collect();
    let rl_pool: Vec<Prompt> = tasks
        .generate(Split::Train, config.rl.pool_size, seed_of(seed, "rl-tasks"))?
        .iter()
        .map(Prompt::from)
        .collect();

    // SFT.
    let train_device = device.clone().autodiff();
    let model = match &config.init {
        Some(dir) => {
            log(&format!(
                "starting from the checkpoint in {}",
                dir.display()
            ));
            rstar_policy::load_model(dir, &train_device)?
        }
        None => Qwen::random(config.model.clone(), seed_of(seed, "init"), &train_device)?,
    };
    let mut sft_log = JsonLines::create(out.join("sft_metrics.jsonl"))?;
    let mut sft_err = None;
    let t0 = Instant::now();
    let every = config.sft.log_every;
    let total = config.sft.steps;
    let mut model = sft::train(
        model,
        &rows,
        &config.sft,
        seed_of(seed, "sft-batches"),
        |s| {
            if let Err(e) = sft_log.push(s)
                && sft_err.is_none()
            {
                sft_err = Some(e);
            }
            if every > 0 && (s.step % every == 0 || s.step == total) {
                log(&format!(
                    "sft step {}/{}: loss {:.3}, lr {:.2e}, grad norm {:.2}, {:.2}s/step",
                    s.step, total, s.loss, s.lr, s.grad_norm, s.secs
                ));
            }
        },
    )?;
    if let Some(e) = sft_err {
        return Err(e);
    }
    let sft_secs = t0.elapsed().as_secs_f64();
    let sft_steps_per_sec = if sft_secs > 0.0 {
        total as f64 / sft_secs
    } else {
        0.0
    };

    let mut evals_log = JsonLines::create(out.join("eval.jsonl"))?;
    let mut evals = Vec::new();
    let mut eval_and_save = |model: &Qwen,
                             phase: &str,
                             rl_steps: u64,
                             tools: &mut dyn ToolExecutor,
                             log: &mut dyn FnMut(&str)|
     -> Result<Vec<Trajectory>, AgentError> {
        let t = Instant::now();
        let snapshot = model.valid();
        let (greedy, sampled, trajectories) = evaluate(
            &snapshot,
            &tokenizer,
            &held_out,
            &config.eval,
            seed_of(seed, "eval"),
            tools,
        )?;
        let row = EvalRow {
            phase: phase.to_string(),
            rl_steps,
            greedy,
            sampled,
        };
        evals_log.push(&row)?;
        log(&format!(
            "eval after {phase}: held-out greedy accuracy {:.1}%, tool error rate {:.1}% ({:.1}% in successes), {:.1}s",
            100.0 * greedy.accuracy,
            100.0 * greedy.tool_error_rate,
            100.0 * greedy.tool_error_rate_success,
            t.elapsed().as_secs_f64()
        ));
        let dir = out.join("checkpoints").join(phase.replace(' ', "-"));
        save_dir(&snapshot, &tokenizer, &dir, WeightDtype::F32)?;
        evals.push(row);
        Ok(trajectories)
    };
    let mut last_samples = eval_and_save(&model, "sft", 0, &mut tools, &mut log)?;
    log(&format!(
        "sft: {total} steps in {sft_secs:.1}s ({sft_steps_per_sec:.2} steps/s)"
    ));

    // Staged GRPO-RoC.
    let mut curriculum = Curriculum::new(config.curriculum.clone())?;
    let mut metrics = JsonLines::create(out.join("metrics.jsonl"))?;
    let mut optimizer = optim::adamw(config.rl.weight_decay);
    let mut stage_pool: Option<(usize, Vec<Prompt>)> = None;
    let mut step_secs = Vec::new();
    let mut tok_rates = Vec::new();
    let mut rl_steps = 0u64;
    while !curriculum.is_finished() {
        let stage = curriculum.stage().clone();
        let index = curriculum.stage_index();
        if stage_pool.as_ref().map(|(i, _)| *i) != Some(index) {
            let prompts = match stage.problems {
                ProblemSet::All => rl_pool.clone(),
                ProblemSet::Hard { k, below } => {
                    let hard = rl::hard_problems(
                        &model.valid(),
                        &tokenizer,
                        &rl_pool,
                        config.rl.hard_pool_size,
                        k,
                        below,
                        &stage,
                        seed_of(seed, &format!("hard-{index}")),
                        &mut tools,
                    )?;
                    log(&format!(
                        "stage `{}`: {} of {} problems not solved {k} of {k}",
                        stage.name,
                        hard.len(),
                        if config.rl.hard_pool_size == 0 {
                            rl_pool.len()
                        } else {
                            config.rl.hard_pool_size.min(rl_pool.len())
                        }
                    ));
                    if hard.is_empty() {
                        log("no hard problem left: the stage trains on the whole pool");
                        rl_pool.clone()
                    } else {
                        hard
                    }
                }
            };
            stage_pool = Some((index, prompts));
        }
        let pool_now = &stage_pool.as_ref().expect("set above").1;
        let t = Instant::now();
        rl_steps += 1;
        let inputs = rl::StepInputs {
            step: rl_steps,
            stage: &stage,
            stage_index: index,
            pool: pool_now,
            options: &config.rl,
            seed,
        };
        let (next, mut record, _) =
            rl::step(model, &mut optimizer, &tokenizer, &inputs, &mut tools)?;
        model = next;
        let decision = curriculum.observe(StepMetrics::new(
            record.all.accuracy,
            record.all.truncation_rate,
        ))?;
        record.decision = match &decision {
            Decision::Stay => "stay".into(),
            Decision::Advance {
                name,
                reset_optimizer,
                ..
            } => {
                format!(
                    "advance to `{name}`{}",
                    if *reset_optimizer {
                        " (optimizer reset)"
                    } else {
                        ""
                    }
                )
            }
            Decision::Finish { .. } => "finish".into(),
        };
        metrics.push(&record)?;
        step_secs.push(t.elapsed().as_secs_f64());
        tok_rates.push(record.rollout_tokens_per_sec);
        log(&format!(
            "rl step {rl_steps} [{}]: reward {:.3}, kept {} of {}, tool errors {:.1}% ({:.1}% in successes), clip {:.3}, kl {:.4}, entropy {:.3}, {:.1}s (rollout {:.1}s, tools {:.1}s, update {:.1}s) -> {}",
            stage.name,
            record.all.accuracy,
            record.kept.count,
            record.rollouts,
            100.0 * record.all.tool_error_rate,
            100.0 * record.all.tool_error_rate_success,
            record.clip_frac,
            record.ppo_kl,
            record.entropy,
            t.elapsed().as_secs_f64(),
            record.time_rollout,
            record.time_tools,
            record.time_update,
            record.decision
        ));
        match decision {
            Decision::Stay => {}
            Decision::Advance {
                reset_optimizer, ..
            } => {
                last_samples = eval_and_save(
                    &model,
                    &format!("stage {}", stage.name),
                    rl_steps,
                    &mut tools,
                    &mut log,
                )?;
                if reset_optimizer {
                    optimizer = optim::adamw(config.rl.weight_decay);
                }
            }
            Decision::Finish { .. } => {
                last_samples = eval_and_save(
                    &model,
                    &format!("stage {}", stage.name),
                    rl_steps,
                    &mut tools,
                    &mut log,
                )?;
            }
        }
    }
    Trajectory::write_jsonl(&out.join("samples.jsonl"), &last_samples)?;
    let mean = |v: &[f64]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    Ok(TrainReport {
        out: out.to_path_buf(),
        evals,
        rl_steps,
        sft_steps_per_sec,
        rl_step_secs: mean(&step_secs),
        rollout_tokens_per_sec: mean(&tok_rates),
        total_secs: started.elapsed().as_secs_f64(),
    })
}
