//! The trainer's run, phase by phase: [`Run::start`] (the model, the problems, the sandbox, the
//! metrics files), [`Run::sft`], [`Run::enter_rl`] (the evaluation after SFT and the RL state),
//! [`Run::stages`] (the curriculum, one [`Run::rl_step`] at a time, with [`Run::evaluate`] when a
//! stage ends) and [`Run::finish`]. Each phase takes what the previous one produced, so no state
//! is "set elsewhere": a run resumed from a checkpoint enters at the phase it was saved in.

use rstar_episode::IoError;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use burn::module::Module;
use burn::optim::ModuleOptimizer;
use burn::tensor::Device;
use rstar_curriculum::{Curriculum, Decision, ProblemSet, Stage, StepMetrics};
use rstar_policy::{Qwen, Tokenizer, WeightDtype, save_dir};
use serde::Serialize;

use super::checkpoint::{self, Lines, Phase, ResumeState, StagePool};
use super::engines::RemoteRollouts;
use super::{
    EvalRow, Observer, RunOptions, TrainConfig, TrainReport, evaluate_with, io_err, optim,
    problems, report_from_files, rl, rl_async, seed_of, sft, template_for,
};
use crate::error::Error;
use crate::tools::RunTools;
use rstar_analysis::tensorboard::{LineKind, ROLLOUT_SAMPLES, RunLog};
use rstar_episode::episode::Trajectory;
use rstar_episode::template::{Template, TemplateFormat};
use rstar_rollout::Prompt;
use rstar_tasks::tasks::sft::SftConfig;
use rstar_tasks::tasks::{Split, TaskSet};

/// The run's TensorBoard log, shared by the JSONL files that mirror their lines into it.
type SharedTb = std::rc::Rc<std::cell::RefCell<RunLog>>;

/// Appends JSON lines to a file and counts them (and mirrors them to TensorBoard).
struct JsonLines {
    path: PathBuf,
    file: std::fs::File,
    lines: usize,
    tb: Option<(SharedTb, LineKind)>,
}

impl JsonLines {
    /// Opens `path` for appending after its first `keep` lines (dropping the rest); `keep`
    /// 0 starts an empty file.
    fn open(path: PathBuf, keep: usize) -> Result<Self, Error> {
        let file = if keep == 0 {
            std::fs::File::create(&path).map_err(io_err(&path))?
        } else {
            checkpoint::truncate_lines(&path, keep)?;
            std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .map_err(io_err(&path))?
        };
        Ok(JsonLines {
            path,
            file,
            lines: keep,
            tb: None,
        })
    }

    fn push(&mut self, value: &impl Serialize) -> Result<(), Error> {
        let line = serde_json::to_string(value)?;
        writeln!(self.file, "{line}").map_err(io_err(&self.path))?;
        self.file.flush().map_err(io_err(&self.path))?;
        self.lines += 1;
        if let Some((tb, kind)) = &self.tb {
            tb.borrow_mut().line(*kind, &serde_json::to_value(value)?)?;
        }
        Ok(())
    }
}

/// The run's three metrics files and the TensorBoard log that mirrors them.
struct Logs {
    sft: JsonLines,
    metrics: JsonLines,
    evals: JsonLines,
    tb: SharedTb,
}

impl Logs {
    /// Opens the metrics files after their first `lines` and starts the TensorBoard log in
    /// `tb_dir` (the kept lines again, none in a new run, then every line as it is pushed).
    fn open(out: &Path, lines: Lines, tb_dir: &Path) -> Result<Self, Error> {
        let mut sft = JsonLines::open(out.join("sft_metrics.jsonl"), lines.sft_metrics)?;
        let mut evals = JsonLines::open(out.join("eval.jsonl"), lines.eval)?;
        let mut metrics = JsonLines::open(out.join("metrics.jsonl"), lines.metrics)?;
        let tb: SharedTb = std::rc::Rc::new(std::cell::RefCell::new(RunLog::start(tb_dir, out)?));
        sft.tb = Some((tb.clone(), LineKind::Sft));
        metrics.tb = Some((tb.clone(), LineKind::Rl));
        evals.tb = Some((tb.clone(), LineKind::Eval));
        Ok(Logs {
            sft,
            metrics,
            evals,
            tb,
        })
    }

    fn lines(&self) -> Lines {
        Lines {
            sft_metrics: self.sft.lines,
            metrics: self.metrics.lines,
            eval: self.evals.lines,
        }
    }
}

/// Where a run enters after [`Run::start`].
pub(super) enum Entry {
    /// SFT with `done` steps behind it; the optimizer is SFT's when resumed.
    Sft {
        model: Qwen,
        optimizer: Option<ModuleOptimizer>,
        done: usize,
    },
    /// RL, from a checkpoint.
    Rl(RlState),
}

/// What the RL phase carries from step to step.
pub(super) struct RlState {
    model: Qwen,
    optimizer: ModuleOptimizer,
    curriculum: Curriculum,
    /// The current stage's problems, once chosen.
    stage_pool: Option<StagePool>,
    /// RL steps done.
    steps: u64,
    /// The scheduled driver's local engines, kept across the steps of a stage (issue #63).
    engines: rl::LocalEngines,
    /// Asynchronous RL (`rl.max_staleness ≥ 1`): the producer rolling out the current
    /// stage's next steps, and the stage it rolls out for.
    /// Boxed: the RL state is moved by value from step to step.
    producer: Option<Box<(usize, rl_async::Producer<Qwen, rl::StepBatch>)>>,
}

/// One run of the recipe: what every phase reads, and the files it writes.
pub(super) struct Run<'a> {
    config: &'a TrainConfig,
    out: &'a Path,
    options: &'a RunOptions,
    observer: &'a mut dyn Observer,
    started: Instant,
    tokenizer: Tokenizer,
    template: TemplateFormat,
    held_out: Vec<Prompt>,
    rl_pool: Vec<Prompt>,
    /// The frozen base of the current phase's LoRA adapters (`sft.lora`, `rl.lora`); `None`
    /// while every weight trains.
    lora_base: Option<checkpoint::LoraBase>,
    /// The run's config as JSON, saved in every checkpoint (a resume compares it with
    /// `config.json`).
    run_config: serde_json::Value,
    /// Where every tool call runs: the in-process sandbox, or code-judge servers.
    tools: RunTools,
    /// The remote engines the scheduled driver's turns go to (`rl.engines` as URLs).
    remote: Option<Arc<RemoteRollouts>>,
    logs: Logs,
    /// The held-out trajectories of the last evaluation (`samples.jsonl`).
    last_samples: Vec<Trajectory>,
}

/// The run from the start (`start` `None`) or from a checkpoint, phase by phase.
pub(super) fn train(
    config: &TrainConfig,
    out: &Path,
    device: &Device,
    start: Option<(PathBuf, ResumeState)>,
    options: &RunOptions,
    observer: &mut dyn Observer,
) -> Result<TrainReport, Error> {
    let (mut run, entry) = Run::start(config, out, device, start, options, observer)?;
    let rl = match entry {
        Entry::Rl(rl) => rl,
        Entry::Sft {
            model,
            optimizer,
            done,
        } => match run.sft(model, optimizer, done)? {
            Some(model) => run.enter_rl(model)?,
            None => return run.stopped(),
        },
    };
    match run.stages(rl)? {
        Some(rl) => run.finish(rl),
        None => run.stopped(),
    }
}

impl<'a> Run<'a> {
    /// Validates the config, loads or creates the model (and, from a checkpoint, its optimizer
    /// and RL state), draws the problems, starts the sandbox and opens the metrics files.
    pub(super) fn start(
        config: &'a TrainConfig,
        out: &'a Path,
        device: &Device,
        start: Option<(PathBuf, ResumeState)>,
        options: &'a RunOptions,
        observer: &'a mut dyn Observer,
    ) -> Result<(Self, Entry), Error> {
        let started = Instant::now();
        config.validate()?;
        let (model, tokenizer, optimizer) = initial_model(
            config,
            out,
            &device.clone().autodiff(),
            start.as_ref(),
            observer,
        )?;
        if tokenizer.vocab_size() > model.config.vocab_size {
            return Err(Error::TrainConfig {
                field: "model.vocab_size".into(),
                message: format!(
                    "is {}, but the tokenizer has {} tokens: ids past the embedding would fail at the first step",
                    model.config.vocab_size,
                    tokenizer.vocab_size()
                ),
            });
        }
        let (held_out, rl_pool) = problems(config)?;
        let tools = RunTools::start_verifying(&config.tools, config.rl.verify)?;
        if let RunTools::Servers(servers) = &tools {
            observer.log(&format!(
                "tool calls: on {} (no in-process sandbox)",
                servers.urls().join(", ")
            ));
            if tools.verifies() {
                observer.log(&format!(
                    "answers: verified on {} (POST /verify)",
                    servers.urls().join(", ")
                ));
            }
        }
        let remote = match config.rl.engines.urls() {
            Some(urls) => {
                let remote = RemoteRollouts::connect(
                    urls,
                    config.rl.engine_kind,
                    super::engines::publish_dir(config.rl.publish_dir.as_deref(), out),
                    config.rl.publish_dtype,
                    &tokenizer,
                )?
                .via(config.rl.publish_via)?
                .lora(if config.rl.lora.is_some() {
                    config.rl.publish_lora
                } else {
                    super::PublishLora::Merged
                })?;
                observer.log(&format!(
                    "rl rollouts: scheduled on {}, {} dispatch; weights published to them before every step",
                    remote.describe(),
                    config.rl.dispatch.name()
                ));
                Some(Arc::new(remote))
            }
            None => {
                if config.rl.rollout_driver == super::RolloutDriver::Scheduled {
                    observer.log(&format!(
                        "rl rollouts: scheduled on {}, {} dispatch",
                        config.rl.engines,
                        config.rl.dispatch.name()
                    ));
                }
                None
            }
        };
        let lines = start.as_ref().map(|(_, s)| s.lines).unwrap_or_default();
        let run = Run {
            config,
            out,
            options,
            observer,
            started,
            template: template_for(&tokenizer),
            tokenizer,
            held_out,
            rl_pool,
            lora_base: start.as_ref().and_then(|(_, s)| s.lora_base.clone()),
            run_config: serde_json::to_value(config)?,
            tools,
            remote,
            logs: Logs::open(
                out,
                lines,
                &options
                    .tensorboard
                    .clone()
                    .unwrap_or_else(|| out.join("tb")),
            )?,
            last_samples: Vec::new(),
        };
        let entry = match start {
            Some((dir, state)) if state.phase != Phase::Sft => {
                let k = config.rl.max_staleness;
                if k > 0 && state.phase == Phase::Rl {
                    run.observer.log(&format!(
                        "asynchronous RL (rl.max_staleness = {k}): the up to {} batch(es) rolled out ahead of step {} were not saved and are rolled out again with the checkpoint's weights; an asynchronous run and its resume are not bit-for-bit the same",
                        k + 1,
                        state.rl_steps
                    ));
                }
                Entry::Rl(run.resumed_rl(&dir, &state, model, optimizer)?)
            }
            start => Entry::Sft {
                model,
                optimizer,
                done: start.map_or(0, |(_, s)| s.sft_steps),
            },
        };
        Ok((run, entry))
    }

    /// The RL state of a checkpoint past SFT.
    fn resumed_rl(
        &self,
        dir: &Path,
        state: &ResumeState,
        model: Qwen,
        optimizer: Option<ModuleOptimizer>,
    ) -> Result<RlState, Error> {
        let Some(cstate) = state.curriculum.clone() else {
            return Err(Error::Resume {
                path: dir.join("state.json"),
                message: "`curriculum` is missing in an RL checkpoint".into(),
            });
        };
        Ok(RlState {
            model,
            optimizer: optimizer.unwrap_or_else(|| optim::rl_adamw(&self.config.rl)),
            curriculum: Curriculum::resume(self.config.curriculum.clone(), cstate)?,
            stage_pool: state.stage_pool.clone(),
            steps: state.rl_steps,
            engines: rl::LocalEngines::new(),
            producer: None,
        })
    }

    /// The SFT corpus with real tool outputs, written to `sft_corpus.jsonl` and tokenized.
    fn sft_corpus(&mut self) -> Result<Vec<sft::SftRow>, Error> {
        let (config, template) = (self.config, self.template);
        let t0 = Instant::now();
        let tasks = TaskSet::new(config.tasks.clone())?;
        let sft_tasks = tasks.generate(
            Split::Train,
            config.sft.corpus_size,
            seed_of(config.seed, "sft-tasks"),
        )?;
        let demos = sft::build_demonstrations_with(
            &Template::of(template),
            &sft_tasks,
            &SftConfig {
                failing_fraction: config.sft.failing_fraction,
                seed: seed_of(config.seed, "sft-bugs"),
                limits: rstar_rollout::setup::base_limits(template),
                wrong_programs: config.sft.wrong_programs.clone(),
                bug_weights: config.sft.bug_weights.clone(),
            },
            &*self.tools.async_tools(),
        )?;
        rstar_tasks::tasks::sft::write_corpus(&self.out.join("sft_corpus.jsonl"), &demos)?;
        self.observer.log(&format!(
            "sft corpus: {} demonstrations ({} with a failing first call, {} with a wrong program), tool outputs in {:.1}s",
            demos.len(),
            demos.iter().filter(|d| d.bug.is_some()).count(),
            demos.iter().filter(|d| d.wrong_program).count(),
            t0.elapsed().as_secs_f64()
        ));
        Ok(sft::tokenize(&demos, &self.tokenizer))
    }

    /// SFT from step `done` to `sft.steps`, checkpointing every `checkpoint_every` steps.
    /// Returns the model, or `None` when a test hook stopped the run.
    pub(super) fn sft(
        &mut self,
        model: Qwen,
        optimizer: Option<ModuleOptimizer>,
        done: usize,
    ) -> Result<Option<Qwen>, Error> {
        let config = self.config;
        let total = config.sft.steps;
        if done >= total {
            return Ok(Some(model));
        }
        let rows = self.sft_corpus()?;
        let model = match &config.sft.lora {
            // A resumed LoRA phase has its adapters already.
            Some(lora) if model.lora.is_none() => {
                let base = config.init.as_deref().ok_or_else(|| Error::TrainConfig {
                    field: "sft.lora".into(),
                    message: "needs `init`, the frozen base".into(),
                })?;
                let base = std::path::absolute(base).map_err(io_err(base))?;
                self.attach_lora(model, lora, config.sft.base_precision, base, "sft")?
            }
            _ => model,
        };
        let optimizer = optimizer.unwrap_or_else(|| optim::adamw(config.sft.weight_decay));
        let t0 = Instant::now();
        let mut stopped = false;
        let stop_after = self.options.stop_after_sft_steps;
        // The SFT optimizer ends with SFT: RL starts a fresh one.
        let (model, _sft_optimizer) = sft::train_from(
            model,
            optimizer,
            &rows,
            &config.sft,
            seed_of(config.seed, "sft-batches"),
            done,
            |s, m, o| {
                self.logs.sft.push(s)?;
                self.observer.sft_step(s, &config.sft);
                if s.step % config.checkpoint_every == 0 {
                    let state = resume_state(
                        Phase::Sft,
                        s.step,
                        0,
                        None,
                        None,
                        self.logs.lines(),
                        &checkpoint::param_ids(m),
                        &self.run_config,
                        self.lora_base.as_ref(),
                    );
                    save_checkpoint(self.out, &self.tokenizer, &state, m, o)?;
                }
                stopped = stop_after.is_some_and(|n| s.step >= n) && s.step < total;
                Ok(!stopped)
            },
        )?;
        if stopped {
            return Ok(None);
        }
        let secs = t0.elapsed().as_secs_f64();
        let steps = total - done;
        self.observer.log(&format!(
            "sft: {steps} steps in {secs:.1}s ({:.2} steps/s)",
            if secs > 0.0 { steps as f64 / secs } else { 0.0 }
        ));
        // RL starts from the fine-tuned model: SFT's adapters folded into their base.
        self.lora_base = None;
        Ok(Some(model.merge_lora()?))
    }

    /// `model` with fresh adapters of `lora` for `phase` (`sft`, `rl`) over its frozen weights,
    /// which are saved in `base` (a relative path is relative to the run directory); logged.
    fn attach_lora(
        &mut self,
        model: Qwen,
        lora: &rstar_policy::LoraConfig,
        precision: rstar_policy::Precision,
        base: PathBuf,
        phase: &str,
    ) -> Result<Qwen, Error> {
        let digest = model.base_digest()?;
        let total = model.config.num_params();
        let model = model
            .with_lora(lora, seed_of(self.config.seed, &format!("{phase}-lora")))?
            .with_base_precision(precision)?;
        let trainable = model.trainable_parameters();
        self.observer.log(&format!(
            "{phase}: {}, {trainable} of {total} parameters train ({:.2}%); base {}{} (digest {})",
            lora_summary(lora),
            100.0 * trainable as f64 / total.max(1) as f64,
            base.display(),
            base_precision_note(precision),
            &digest[..12]
        ));
        self.lora_base = Some(checkpoint::LoraBase {
            path: base,
            digest,
            precision,
        });
        Ok(model)
    }

    /// Evaluates the SFT'd model and starts the RL state (a fresh optimizer and curriculum),
    /// checkpointed.
    pub(super) fn enter_rl(&mut self, model: Qwen) -> Result<RlState, Error> {
        self.evaluate(&model, "sft", 0)?;
        let model = match &self.config.rl.lora {
            Some(lora) => {
                // The base is the model just evaluated: `init` itself when SFT took no step,
                // else the copy the evaluation saved in the run.
                let base = match &self.config.init {
                    Some(init) if self.config.sft.steps == 0 => {
                        std::path::absolute(init).map_err(io_err(init))?
                    }
                    _ => Path::new("checkpoints").join("sft"),
                };
                let precision = self.config.rl.base_precision;
                self.attach_lora(model, lora, precision, base, "rl")?
            }
            None => model,
        };
        let rl = RlState {
            model,
            optimizer: optim::rl_adamw(&self.config.rl),
            curriculum: Curriculum::new(self.config.curriculum.clone())?,
            stage_pool: None,
            steps: 0,
            engines: rl::LocalEngines::new(),
            producer: None,
        };
        self.checkpoint_rl(&rl, Phase::Rl)?;
        Ok(rl)
    }

    /// Staged GRPO-RoC until the curriculum finishes. `None` when a test hook stopped the run.
    pub(super) fn stages(&mut self, mut rl: RlState) -> Result<Option<RlState>, Error> {
        while !rl.curriculum.is_finished() {
            let (next, decision, stage) = self.rl_step(rl)?;
            rl = next;
            if self.after_step(&mut rl, &decision, &stage)? {
                return Ok(None);
            }
        }
        Ok(Some(rl))
    }

    /// The problems of stage `index`: the whole pool, or those the policy does not solve `k`
    /// of `k` times for a hard stage (the whole pool when none is left).
    fn stage_problems(
        &mut self,
        model: &Qwen,
        stage: &Stage,
        index: usize,
    ) -> Result<Vec<Prompt>, Error> {
        let ProblemSet::Hard { k, below } = stage.problems else {
            return Ok(self.rl_pool.clone());
        };
        let config = self.config;
        let check = rl::HardCheck {
            limit: config.rl.hard_pool_size,
            k,
            below,
            stage,
            template: self.template,
            seed: seed_of(config.seed, &format!("hard-{index}")),
            chunk: config.rl.prompts_per_step,
            max_batch: config.rl.max_batch,
        };
        let hard = rl::hard_problems(
            &model.valid(),
            &self.tokenizer,
            &self.rl_pool,
            &check,
            &*self.tools.async_tools(),
        )?;
        let checked = if config.rl.hard_pool_size == 0 {
            self.rl_pool.len()
        } else {
            config.rl.hard_pool_size.min(self.rl_pool.len())
        };
        self.observer.log(&format!(
            "stage `{}`: {} of {checked} problems not solved {k} of {k}",
            stage.name,
            hard.len(),
        ));
        if hard.is_empty() {
            self.observer
                .log("no hard problem left: the stage trains on the whole pool");
            return Ok(self.rl_pool.clone());
        }
        Ok(hard)
    }

    /// Starts the asynchronous producer of stage `index` from the current step: the
    /// scheduled driver on the run's remote engines (published to before each batch) or local
    /// ones (moved to the producer's thread) and tools, with the current policy as version
    /// `steps − 1`.
    fn spawn_producer(
        &mut self,
        model: &Qwen,
        engines: &mut rl::LocalEngines,
        prompts: &[Prompt],
        steps: u64,
        stage: &Stage,
        index: usize,
    ) -> rl_async::Producer<Qwen, rl::StepBatch> {
        let config = self.config;
        let prompts = prompts.to_vec();
        let stage = stage.clone();
        let options = config.rl.clone();
        let tokenizer = self.tokenizer.clone();
        let tools = self.tools.async_tools();
        let (seed, template) = (config.seed, self.template);
        let budget = config.tools.latency_budget_secs;
        if config.rl.grpo.rollout_correction.is_off() {
            self.observer.log(&format!(
                "asynchronous RL: rollouts up to {} update(s) old are trained on with the clipped ratio against the policy before the update; with the rollout correction off they are not weighed by the engines' own probabilities (--rollout-correction token)",
                config.rl.max_staleness
            ));
        }
        let remote = self.remote.clone();
        let mut engines = std::mem::take(engines);
        let gate = rl_async::Gate::new(config.rl.max_staleness);
        rl_async::Producer::spawn(
            gate,
            steps,
            steps - 1,
            rl::rollout_policy(model, &config.rl),
            move |step, version, policy: &Qwen| {
                let inputs = rl::StepInputs {
                    step,
                    stage: &stage,
                    stage_index: index,
                    pool: &prompts,
                    options: &options,
                    seed,
                    template,
                    tool_latency_budget_secs: budget,
                    policy_version: Some(version),
                };
                let step_tools = rl::StepTools::new(&*tools)
                    .scheduled(Arc::clone(&tools))
                    .remote(remote.as_deref())
                    .engines(&mut engines);
                rl::collect(policy, &tokenizer, &inputs, step_tools)
            },
        )
    }

    /// One RL step of the current stage (choosing the stage's problems first when it starts):
    /// the update, the curriculum's decision, the metrics line. Returns the state after it,
    /// the decision and the stage the step belonged to.
    pub(super) fn rl_step(&mut self, mut rl: RlState) -> Result<(RlState, Decision, Stage), Error> {
        let config = self.config;
        let stage = rl.curriculum.stage().clone();
        let index = rl.curriculum.stage_index();
        let pool = match rl.stage_pool.take() {
            Some(pool) if pool.stage == index => pool,
            _ => StagePool {
                stage: index,
                prompts: self.stage_problems(&rl.model, &stage, index)?,
            },
        };
        let pool = rl.stage_pool.insert(pool);
        let t = Instant::now();
        rl.steps += 1;
        let inputs = rl::StepInputs {
            step: rl.steps,
            stage: &stage,
            stage_index: index,
            pool: &pool.prompts,
            options: &config.rl,
            seed: config.seed,
            template: self.template,
            tool_latency_budget_secs: config.tools.latency_budget_secs,
            policy_version: None,
        };
        let mut to_publish = None;
        let (next, mut record, rollouts) = if config.rl.max_staleness == 0 {
            // The scheduled driver runs its calls on the same tools, asynchronously.
            let tools = self.tools.async_tools();
            let scheduled = (self.config.rl.rollout_driver == super::RolloutDriver::Scheduled)
                .then(|| Arc::clone(&tools));
            let mut step_tools = rl::StepTools::new(&*tools)
                .remote(self.remote.as_deref())
                .engines(&mut rl.engines);
            step_tools.scheduled = scheduled;
            rl::step(
                rl.model,
                &mut rl.optimizer,
                &self.tokenizer,
                &inputs,
                step_tools,
            )?
        } else {
            if rl.producer.as_ref().is_none_or(|p| p.0 != index) {
                let producer = self.spawn_producer(
                    &rl.model,
                    &mut rl.engines,
                    &pool.prompts,
                    rl.steps,
                    &stage,
                    index,
                );
                rl.producer = Some(Box::new((index, producer)));
            }
            let Some(producer) = rl.producer.as_ref().map(|p| &p.1) else {
                unreachable!("the producer was just started")
            };
            let waited = Instant::now();
            let produced = producer.next()?;
            let trainer_idle_secs = waited.elapsed().as_secs_f64();
            if produced.step != rl.steps {
                return Err(Error::Io(IoError::new(
                    "<rollout producer>",
                    std::io::Error::other(format!(
                        "handed out the batch of step {} for step {}",
                        produced.step, rl.steps
                    )),
                )));
            }
            let mut batch = produced.batch;
            let current = rl.steps - 1;
            let mut a = rl_async::drop_stale(
                &mut batch,
                current,
                config.rl.max_staleness,
                produced.version,
            );
            a.engine_idle_secs = produced.engine_idle_secs;
            a.trainer_idle_secs = trainer_idle_secs;
            if a.dropped_groups > 0 {
                self.observer.log(&format!(
                    "warning: step {}: dropped {} group(s) staler than rl.max_staleness = {} (never trained on)",
                    rl.steps, a.dropped_groups, config.rl.max_staleness
                ));
            }
            let (next, mut record, rollouts, published) =
                rl::train_step(rl.model, &mut rl.optimizer, batch, &inputs)?;
            // Published once the curriculum has decided the stage goes on (below): the
            // version would otherwise let the producer start a batch only to drop it.
            to_publish = Some(published);
            record.asynchronous = Some(a);
            (next, record, rollouts)
        };
        if let Some(mean) = record
            .logprob_diff_mean
            .filter(|&m| m > config.rl.logprob_diff_warn)
        {
            self.observer.log(&format!(
                "warning: step {}: the engines' log-probs differ from the trainer's by {mean:.3e} on average (max {:.3e}, threshold rl.logprob_diff_warn = {}): are the engines serving the published weights with the same tokenizer and dtype?",
                rl.steps,
                record.logprob_diff_max.unwrap_or(f64::NAN),
                config.rl.logprob_diff_warn
            ));
        }
        if let Some(line) = super::observer::tool_budget_warning(&record) {
            self.observer.log(&line);
        }
        if let Some(d) = record.dispatch.as_ref().filter(|d| d.engines_lost > 0) {
            self.observer.log(&format!(
                "warning: step {}: lost {} ({} turns written again on the other engines; no rollout lost); the run goes on without them",
                rl.steps,
                d.lost.join(", "),
                d.redispatched
            ));
        }
        rl.model = next;
        let decision = rl.curriculum.observe(StepMetrics::new(
            record.all.accuracy,
            record.all.truncation_rate,
        ))?;
        record.decision = decision_line(&decision);
        // The stage goes on: the producer rolls out with the new version. It ends (or the
        // run): what the producer rolled out for the next steps is the old stage's, dropped.
        if matches!(decision, Decision::Stay) {
            if let (Some(producer), Some(policy)) = (rl.producer.as_ref(), to_publish) {
                let producer = &producer.1;
                producer.publish(rl.steps, policy);
            }
        } else if let Some(producer) = rl.producer.take() {
            let (_, producer) = *producer;
            let dropped = producer.stop();
            if dropped > 0 {
                self.observer.log(&format!(
                    "stage `{}` ended: dropped {dropped} batch(es) rolled out ahead for it",
                    stage.name
                ));
            }
        }
        record.time_step = t.elapsed().as_secs_f64();
        self.logs.metrics.push(&record)?;
        self.logs.tb.borrow_mut().samples(
            "rollouts/samples",
            rl.steps as i64,
            &rollouts,
            ROLLOUT_SAMPLES,
        )?;
        self.observer
            .rl_step(&record, config.curriculum.total_steps());
        Ok((rl, decision, stage))
    }

    /// After a step: the evaluation when a stage ends (always followed by a checkpoint: it is
    /// expensive to replay), the optimizer reset, the plots, the periodic checkpoint. Returns
    /// whether a test hook stops the run here.
    fn after_step(
        &mut self,
        rl: &mut RlState,
        decision: &Decision,
        stage: &Stage,
    ) -> Result<bool, Error> {
        let config = self.config;
        let evaluated = !matches!(decision, Decision::Stay);
        if evaluated {
            self.evaluate(&rl.model, &format!("stage {}", stage.name), rl.steps)?;
        }
        if let Decision::Advance {
            reset_optimizer: true,
            ..
        } = decision
        {
            rl.optimizer = optim::rl_adamw(&config.rl);
        }
        if let Err(e) = super::plots::draw(self.out) {
            self.observer.log(&format!("plots not drawn: {e}"));
        }
        if rl.curriculum.is_finished() {
            return Ok(false);
        }
        if evaluated || rl.steps.is_multiple_of(config.checkpoint_every as u64) {
            self.checkpoint_rl(rl, Phase::Rl)?;
        }
        Ok(self
            .options
            .stop_after_rl_steps
            .is_some_and(|n| rl.steps >= n))
    }

    /// Evaluates on the held-out problems, logs, appends to `eval.jsonl` and saves the
    /// stage-end checkpoint `checkpoints/<phase>/`; keeps the trajectories for `samples.jsonl`.
    pub(super) fn evaluate(
        &mut self,
        model: &Qwen,
        phase: &str,
        rl_steps: u64,
    ) -> Result<(), Error> {
        let t = Instant::now();
        let snapshot = model.valid();
        let evaluation = evaluate_with(
            self.template,
            &snapshot,
            &self.tokenizer,
            &self.held_out,
            &self.config.eval,
            seed_of(self.config.seed, "eval"),
            &*self.tools.async_tools(),
        )?;
        let greedy = evaluation.greedy;
        let summary = evaluation.sampled_summary.as_ref();
        let row = EvalRow {
            phase: phase.to_string(),
            rl_steps,
            greedy,
            sampled: evaluation.sampled,
            avg_at_k: summary.map(|s| s.avg_at_k),
            pass_at_k: summary.map(|s| s.pass_at_k.clone()).unwrap_or_default(),
            more: evaluation.more,
        };
        let more: String = row
            .more
            .iter()
            .map(|m| {
                format!(
                    "avg@k {:.1}% at T = {}, ",
                    100.0 * m.stats.accuracy,
                    m.temperature
                )
            })
            .collect();
        let avg = match (evaluation.sampled, summary) {
            (Some(s), Some(summary)) => format!(
                "avg@{} {:.1}% (tool error rate {:.1}%, {:.1}% in successes), ",
                summary.samples,
                100.0 * summary.avg_at_k,
                100.0 * s.tool_error_rate,
                100.0 * s.tool_error_rate_success
            ),
            _ => String::new(),
        };
        self.observer.log(&format!(
            "eval after {phase}: held-out {avg}{more}greedy accuracy {:.1}%, tool error rate {:.1}% ({:.1}% in successes), {:.1}s",
            100.0 * greedy.accuracy,
            100.0 * greedy.tool_error_rate,
            100.0 * greedy.tool_error_rate_success,
            t.elapsed().as_secs_f64()
        ));
        let dir = self.out.join("checkpoints").join(phase.replace(' ', "-"));
        match &self.lora_base {
            // The adapters in PEFT's layout, over the base named by absolute path (`rstar eval
            // --model BASE --adapter DIR`, `rstar lora merge`, PEFT, vLLM).
            Some(base) => {
                let base = std::path::absolute(base.dir(self.out)).map_err(io_err(&base.path))?;
                if dir.exists() {
                    std::fs::remove_dir_all(&dir).map_err(io_err(&dir))?;
                }
                rstar_policy::lora::save_adapter(&snapshot, &dir, &base.to_string_lossy())?;
            }
            None => save_dir(&snapshot, &self.tokenizer, &dir, WeightDtype::F32)?,
        }
        link_final(&dir)?;
        self.logs.evals.push(&row)?;
        self.last_samples = evaluation.trajectories;
        Ok(())
    }

    /// Writes `samples.jsonl` and the final checkpoint, and reports.
    pub(super) fn finish(mut self, rl: RlState) -> Result<TrainReport, Error> {
        if !self.config.record_entropy {
            self.last_samples
                .iter_mut()
                .for_each(Trajectory::strip_token_stats);
        }
        Trajectory::write_jsonl(&self.out.join("samples.jsonl"), &self.last_samples)?;
        self.logs
            .tb
            .borrow_mut()
            .samples("val/samples", rl.steps as i64, &self.last_samples, 4)?;
        self.checkpoint_rl(&rl, Phase::Finished)?;
        report_from_files(self.out, self.started, true, self.config.eval.temperature)
    }

    /// The report of a run a test hook stopped (as a kill would leave it).
    fn stopped(self) -> Result<TrainReport, Error> {
        report_from_files(self.out, self.started, false, self.config.eval.temperature)
    }

    /// Writes the resumable checkpoint of an RL (or finished) run.
    fn checkpoint_rl(&self, rl: &RlState, phase: Phase) -> Result<(), Error> {
        let state = resume_state(
            phase,
            self.config.sft.steps,
            rl.steps,
            Some(&rl.curriculum),
            rl.stage_pool.as_ref(),
            self.logs.lines(),
            &checkpoint::param_ids(&rl.model),
            &self.run_config,
            self.lora_base.as_ref(),
        );
        save_checkpoint(self.out, &self.tokenizer, &state, &rl.model, &rl.optimizer)
    }
}

/// Points `checkpoints/final` at `dir`, the checkpoint just evaluated (so, once the run has
/// ended, at its last stage's), replacing the previous link atomically. A stable path for
/// `rstar eval` and `rstar serve` whatever the curriculum's stage names are.
fn link_final(dir: &Path) -> Result<(), Error> {
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Ok(());
    };
    let link = parent.join(FINAL_CHECKPOINT);
    let tmp = parent.join(format!(".{FINAL_CHECKPOINT}.tmp"));
    if tmp.symlink_metadata().is_ok() {
        std::fs::remove_file(&tmp).map_err(io_err(&tmp))?;
    }
    #[cfg(unix)]
    std::os::unix::fs::symlink(name, &tmp).map_err(io_err(&tmp))?;
    #[cfg(not(unix))]
    {
        // No relative links to rely on: a copy of the directory's files.
        std::fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
        for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
            let from = entry.map_err(io_err(dir))?.path();
            if let Some(file) = from.file_name() {
                std::fs::copy(&from, tmp.join(file)).map_err(io_err(&from))?;
            }
        }
        if link.exists() {
            std::fs::remove_dir_all(&link).map_err(io_err(&link))?;
        }
    }
    std::fs::rename(&tmp, &link).map_err(io_err(&link))
}

/// The name of the link to the newest evaluated checkpoint, `checkpoints/final`.
pub const FINAL_CHECKPOINT: &str = "final";

/// The resumable state at a point of a run.
#[allow(clippy::too_many_arguments)] // reason: one argument per field of the state
fn resume_state(
    phase: Phase,
    sft_steps: usize,
    rl_steps: u64,
    curriculum: Option<&Curriculum>,
    stage_pool: Option<&StagePool>,
    lines: Lines,
    param_ids: &[u64],
    run_config: &serde_json::Value,
    lora_base: Option<&checkpoint::LoraBase>,
) -> ResumeState {
    ResumeState {
        version: checkpoint::STATE_VERSION,
        phase,
        sft_steps,
        rl_steps,
        curriculum: curriculum.map(|c| c.state().clone()),
        stage_pool: stage_pool.cloned(),
        lines,
        param_ids: param_ids.to_vec(),
        run_config: Some(run_config.clone()),
        lora_base: lora_base.cloned(),
    }
}

/// Writes `checkpoints/last/` of the run in `out`.
fn save_checkpoint(
    out: &Path,
    tokenizer: &Tokenizer,
    state: &ResumeState,
    model: &Qwen,
    optimizer: &ModuleOptimizer,
) -> Result<(), Error> {
    checkpoint::save(&checkpoint::dir_of(out), state, model, tokenizer, optimizer)
}

/// The model, tokenizer and (from a checkpoint) optimizer a run starts with.
fn initial_model(
    config: &TrainConfig,
    out: &Path,
    train_device: &Device,
    start: Option<&(PathBuf, ResumeState)>,
    observer: &mut dyn Observer,
) -> Result<(Qwen, Tokenizer, Option<ModuleOptimizer>), Error> {
    if let Some((dir, state)) = start {
        let fresh = if state.phase == Phase::Sft {
            optim::adamw(config.sft.weight_decay)
        } else {
            optim::rl_adamw(&config.rl)
        };
        let (m, t, o) = checkpoint::load(out, dir, state, train_device, fresh)?;
        return Ok((m, t, Some(o)));
    }
    match &config.init {
        Some(dir) => {
            observer.log(&format!("starting from the model in {}", dir.display()));
            let (m, t) = rstar_policy::load_dir(dir, train_device)?;
            Ok((m, t, None))
        }
        None => Ok((
            Qwen::random(
                config.model.clone(),
                seed_of(config.seed, "init"),
                train_device,
            )?,
            Tokenizer::char(),
            None,
        )),
    }
}

/// ` with its projections in bf16` for a bf16 base, else nothing: the log's word on how a LoRA
/// phase holds its frozen base.
pub(crate) fn base_precision_note(precision: rstar_policy::Precision) -> &'static str {
    match precision {
        rstar_policy::Precision::Bf16 => " with its projections in bf16",
        rstar_policy::Precision::F32 => "",
    }
}

/// `LoRA rank 16 (alpha 32, rsLoRA) on q_proj, …`: what a LoRA phase trains.
pub(crate) fn lora_summary(lora: &rstar_policy::LoraConfig) -> String {
    format!(
        "LoRA rank {} (alpha {}{}) on {}",
        lora.rank,
        lora.alpha,
        if lora.use_rslora { ", rsLoRA" } else { "" },
        lora.targets.join(", ")
    )
}

/// The curriculum's decision as `metrics.jsonl` writes it.
fn decision_line(decision: &Decision) -> String {
    match decision {
        Decision::Stay => "stay".into(),
        Decision::Advance {
            name,
            reset_optimizer,
            ..
        } => format!(
            "advance to `{name}`{}",
            if *reset_optimizer {
                " (optimizer reset)"
            } else {
                ""
            }
        ),
        Decision::Finish { .. } => "finish".into(),
    }
}
