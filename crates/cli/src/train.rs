//! `rstar train`: SFT, then staged GRPO-RoC, on the CPU (`flex`) or a GPU (`wgpu`).
//!
//! Writes `runs/<preset>` (or `--out DIR`): the resolved config, SFT and RL metrics as JSONL,
//! evaluations, plots, checkpoints and sample trajectories (see `rstar_agent::train`), and
//! prints the table of held-out accuracy and tool error rate after SFT and after each stage.
//! `--resume RUN_DIR` continues a run from its last checkpoint; `rstar train plot RUN_DIR`
//! redraws a run's plots, `rstar train tensorboard RUN_DIR` writes its TensorBoard events from
//! its JSONL files. A run writes TensorBoard events as it goes (`<out>/tb`, or
//! `--tensorboard DIR`) and its report (`<out>/report.html`, see `rstar report`) at the end.
//! On a terminal, SFT and RL steps show progress bars on stderr; on anything else one line per
//! step.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};

use rstar_agent::remote::EngineKind;
use rstar_agent::scheduler::DispatchPolicy;
use rstar_agent::train::rl::StepRecord;
use rstar_agent::train::sft::SftStep;
use rstar_agent::train::{
    self as trainer, Engines, Observer, RocMode, RolloutDriver, RunOptions, SftOptions, TrainConfig,
};

/// Arguments of `rstar train`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    /// `plot RUN_DIR`: redraw a run's plots; `tensorboard RUN_DIR`: write its TensorBoard
    /// events (instead of training).
    #[command(subcommand)]
    pub action: Option<Action>,
    /// The preset: `smoke` (CI, seconds), `tiny` (the embedded default, minutes) or
    /// `rstar2-agent` (the paper's hyperparameters; needs --model and --data) [default: tiny].
    #[arg(long)]
    pub preset: Option<String>,
    /// A JSON config file (the layout of `runs/<name>/config.json`); replaces `--preset`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The run directory [default: runs/<preset>].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Continue the run in this directory from its last checkpoint, with its saved config.
    #[arg(long, value_name = "RUN_DIR")]
    pub resume: Option<PathBuf>,
    /// With --resume: continue although the run's config.json was edited since its last
    /// checkpoint (refused otherwise); the edit is logged and recorded in config_edits.jsonl.
    #[arg(long, requires = "resume")]
    pub resume_with_edited_config: bool,
    /// With --resume: skip checking the checkpoint's files against their SHA-256 digests
    /// (checksums.sha256), for huge checkpoints on slow disks. Weights are still checked for
    /// NaN and infinities.
    #[arg(long, requires = "resume")]
    pub no_verify: bool,
    /// Seed of everything random.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Resample-on-Correct: `paper` (2G rolled out, G kept by the paper's rule), `reference`
    /// (microsoft/rStar's rule) or `off` (plain GRPO on G samples) [default: the preset's,
    /// paper].
    #[arg(long, value_name = "MODE", conflicts_with = "no_roc")]
    pub roc: Option<RocMode>,
    /// Ablation: `--roc off`.
    #[arg(long)]
    pub no_roc: bool,
    /// SFT steps (overrides the preset).
    #[arg(long)]
    pub sft_steps: Option<usize>,
    /// Threads an SFT step's batch is split over (`sft.threads`; each shard's forward and
    /// backward pass on its own core; 1 keeps the whole batch on one thread) [default: the
    /// preset's].
    #[arg(long, value_name = "N")]
    pub sft_threads: Option<usize>,
    /// Micro-batches an SFT step's batch is cut into after sorting its rows by length, each
    /// padded only to its own longest row (`sft.micro_batches`) [default: the preset's].
    #[arg(long, value_name = "N")]
    pub sft_micro_batches: Option<usize>,
    /// Compute precision of SFT and RL (`sft.precision`, `rl.precision`): `f32`, or `bf16`
    /// compute over f32 master weights and optimizer state [default: the preset's, f32].
    #[arg(long, value_name = "f32|bf16")]
    pub precision: Option<rstar_agent::policy::Precision>,
    /// Recompute each decoder layer in the backward pass instead of keeping its activations
    /// (`sft.gradient_checkpointing`, `rl.gradient_checkpointing`): one layer's activations and
    /// a hidden state per layer alive, for one more forward pass [default: off].
    #[arg(long)]
    pub gradient_checkpointing: bool,
    /// RL on LoRA adapters (`rl.lora`) over the model RL starts from, frozen. The trainer's SFT
    /// phase trains adapters over `init` when the config sets `sft.lora`.
    #[command(flatten)]
    pub lora: crate::lora::LoraArgs,
    /// Start from a model directory (an HF checkpoint with its tokenizer, or ours, e.g.
    /// runs/tiny/checkpoints/sft) instead of a random character model.
    #[arg(long, visible_alias = "init", value_name = "DIR")]
    pub model: Option<PathBuf>,
    /// Train and evaluate on the problems of this dataset file instead of the embedded tasks.
    #[arg(long, value_name = "FILE")]
    pub data: Option<PathBuf>,
    #[arg(long, default_value = "flex", help = crate::backend::HELP)]
    pub backend: String,
    /// RL learning rate (overrides the preset).
    #[arg(long)]
    pub rl_lr: Option<f64>,
    /// How RL steps roll out their groups: `lockstep` (one batched generation call per round;
    /// bit-reproducible) or `scheduled` (local engines with copies of the policy, each rollout
    /// on its own, per-turn seeds) [default: the preset's, lockstep].
    #[arg(long, value_name = "DRIVER")]
    pub rollout: Option<RolloutDriver>,
    /// Where the scheduled driver's turns are written: a number of local engines
    /// [default: 1], or the URLs of OpenAI-compatible servers (`rstar serve`, SGLang, vLLM),
    /// comma-separated, which the trainer publishes its weights to before every step (URLs
    /// imply `--rollout scheduled`). Servers started with `--api-key` get the key from
    /// `$RSTAR_ENGINE_API_KEY`.
    #[arg(long, value_name = "N|URL[,URL…]")]
    pub engines: Option<Engines>,
    /// With `--engines URL…`: `rstar`, `sglang` or `vllm` [default: read from each server's
    /// `/v1/models`].
    #[arg(long, value_name = "KIND")]
    pub engine_kind: Option<EngineKind>,
    /// With `--engines URL…`: the directory weights are published to; every engine must be
    /// able to read it [default: <out>/published].
    #[arg(long, value_name = "DIR")]
    pub publish_dir: Option<PathBuf>,
    /// With `--engines URL…`: the published weights' element type, `f32` (exact) or `bf16`
    /// (half the size) [default: f32].
    #[arg(long, value_name = "DTYPE", value_parser = ["f32", "bf16"])]
    pub publish_dtype: Option<String>,
    /// With `--engines URL…`: `disk` (write to the publish directory, which every engine
    /// reads) or `http` (push to each `rstar serve` engine, for engines on other machines)
    /// [default: disk].
    #[arg(long, value_name = "HOW")]
    pub publish_via: Option<rstar_agent::train::PublishVia>,
    /// With `--engines URL…` and `--lora`: `adapter` (publish the adapter alone, loaded by
    /// each engine under the step's version: `rstar serve`, vLLM with `--enable-lora`) or
    /// `merged` (the merged model, for engines without runtime adapters) [default: adapter].
    #[arg(long, value_name = "WHAT")]
    pub publish_lora: Option<rstar_agent::train::PublishLora>,
    /// Rollout correction (`rl.grpo.rollout_correction.rollout_is`): weigh each token of the
    /// loss by the ratio of the trainer's log-prob to the engine's that sampled it, per
    /// `token` or per `sequence`, or `off` [default: the config's, off]. For bf16 or vLLM
    /// engines, and stale rollouts.
    #[arg(long, value_name = "LEVEL")]
    pub rollout_correction: Option<CorrectionLevel>,
    /// The correction's threshold (`rollout_is_threshold`): a number for truncated IS (TIS,
    /// e.g. 2.0) or LOWER_UPPER for masked IS (IcePop, e.g. 0.5_2.0) [default: 2.0].
    #[arg(long, value_name = "T")]
    pub rollout_is_threshold: Option<rstar_agent::grpo::IsThreshold>,
    /// Asynchronous RL (`rl.max_staleness`): the engines roll out the next steps while the
    /// trainer updates, with rollouts at most K updates older than the policy trained on them
    /// (`--rollout scheduled`); 0 is the synchronous loop [default: 0].
    #[arg(long, value_name = "K")]
    pub max_staleness: Option<u64>,
    /// With `--data`: go on when the sandbox's Python cannot import numpy and sympy (what model
    /// code on real problems imports); without it such an interpreter stops the run before
    /// training.
    #[arg(long)]
    pub allow_missing_preload: bool,
    /// `--rollout scheduled`: `static`, `least-requests` or `kv-aware` [default: kv-aware].
    #[arg(long, value_name = "POLICY")]
    pub dispatch: Option<DispatchPolicy>,
    /// Keep per-token entropies, log-probabilities and token texts in samples.jsonl (for
    /// `rstar analyze entropy`); without it they are stripped.
    #[arg(long)]
    pub record_entropy: bool,
    /// Write the resumable checkpoint every N SFT and RL steps (and after every evaluation)
    /// [default: 1; 10 with `--preset rstar2-agent`].
    #[arg(long, value_name = "N")]
    pub checkpoint_every: Option<usize>,
    /// Python interpreter of the tool sandbox.
    #[arg(long, env = "RSTAR_PYTHON")]
    pub python: Option<PathBuf>,
    /// Tool sandbox workers [default: one per CPU].
    #[arg(long)]
    pub workers: Option<usize>,
    /// Run every tool call on code-judge servers (`rstar tools serve`, code-judge) at these
    /// URLs, comma-separated, instead of the in-process sandbox (`tools.servers`; also with
    /// `--resume`, to move a run to other servers).
    #[arg(long, value_name = "URL[,URL…]", value_delimiter = ',')]
    pub tools: Vec<String>,
    /// Where finished rollouts are scored: `local` (the in-process verifier) or `remote` (the
    /// `POST /verify` of the `--tools` servers, in batches beside the tool calls; the same
    /// verifier, so the same scores) [default: local] (`rl.verify`).
    #[arg(long, value_name = "local|remote")]
    pub verify: Option<rstar_agent::train::VerifyAt>,
    /// Report every RL step with a tool call slower than this many seconds, from submission
    /// to answer (a warning, `tool_latency.over_budget` in metrics.jsonl, a line in the
    /// report) [default: no budget] (`tools.latency_budget_secs`).
    #[arg(long, value_name = "SECS")]
    pub tool_latency_budget: Option<f64>,
    /// Where to write TensorBoard event files [default: <out>/tb]; one directory per run
    /// (a resume replaces the event files this trainer wrote there).
    #[arg(long, value_name = "DIR")]
    pub tensorboard: Option<PathBuf>,
    /// Print the final report as JSON on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Print the resolved config (what `config.json` would hold) on stdout and exit without
    /// training; fails, after printing, when the config does not validate.
    #[arg(long)]
    pub dry_run: bool,
    /// Test hook: stop (as if killed) after this many SFT steps of the run.
    #[arg(long, hide = true)]
    pub stop_after_sft_steps: Option<usize>,
    /// Test hook: stop (as if killed) after this many RL steps of the run.
    #[arg(long, hide = true)]
    pub stop_after_rl_steps: Option<u64>,
}

/// Subcommands of `rstar train`.
#[derive(Debug, clap::Subcommand)]
pub enum Action {
    /// Redraw `RUN_DIR/plots/*.svg` from `RUN_DIR/metrics.jsonl`.
    Plot {
        /// The run directory.
        run: PathBuf,
    },
    /// Write TensorBoard events of `RUN_DIR`'s JSONL files (metrics, SFT metrics,
    /// evaluations, sampled trajectories) to `RUN_DIR/tb` (replacing the events written there
    /// by a previous conversion or by the trainer).
    Tensorboard {
        /// The run directory.
        run: PathBuf,
        /// The event directory [default: RUN_DIR/tb].
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

pub use crate::backend::device_of;

/// Progress on stderr: bars on a terminal (log lines printed above them), plain lines
/// otherwise.
struct Progress {
    tty: bool,
    bar: Option<(&'static str, ProgressBar)>,
}

impl Progress {
    fn bar(&mut self, kind: &'static str, len: Option<u64>) -> &ProgressBar {
        if self.bar.as_ref().map(|(k, _)| *k) != Some(kind) {
            if let Some((_, old)) = self.bar.take() {
                old.finish_and_clear();
            }
            let template = match len {
                Some(_) => "{prefix} [{bar:30}] {pos}/{len} {elapsed_precise} eta {eta} {msg}",
                None => "{prefix} {spinner} {pos} steps {elapsed_precise} {msg}",
            };
            let bar = match len {
                Some(n) => ProgressBar::new(n),
                None => ProgressBar::new_spinner(),
            };
            bar.set_style(
                ProgressStyle::with_template(template)
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            bar.set_prefix(kind);
            self.bar = Some((kind, bar));
        }
        &self.bar.as_ref().expect("set above").1
    }

    fn finish(&mut self) {
        if let Some((_, bar)) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Observer for Progress {
    fn log(&mut self, line: &str) {
        match &self.bar {
            Some((_, bar)) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    fn sft_step(&mut self, step: &SftStep, options: &SftOptions) {
        if !self.tty {
            if trainer::sft_logged(step, options) {
                eprintln!("{}", trainer::sft_line(step, options.steps));
            }
            return;
        }
        let bar = self.bar("sft", Some(options.steps as u64));
        bar.set_position(step.step as u64);
        bar.set_message(format!("loss {:.3}, lr {:.2e}", step.loss, step.lr));
        if trainer::sft_logged(step, options) {
            bar.println(trainer::sft_line(step, options.steps));
        }
        if step.step == options.steps {
            self.finish();
        }
    }

    fn rl_step(&mut self, record: &StepRecord, total: Option<u64>) {
        let line = trainer::rl_line(record);
        if !self.tty {
            eprintln!("{line}");
            return;
        }
        let bar = self.bar("rl", total);
        bar.println(line);
        bar.set_position(record.step);
        bar.set_message(format!(
            "[{}] reward {:.3}, kept {:.3}, tool errors {:.1}%",
            record.stage_name,
            record.all.accuracy,
            record.kept.accuracy,
            100.0 * record.all.tool_error_rate
        ));
        if record.decision == "finish" {
            self.finish();
        }
    }
}

/// The flags that change a run's config; refused with `--resume`.
fn config_flags(args: &Args) -> Vec<&'static str> {
    let mut set = Vec::new();
    let flags = [
        ("--preset", args.preset.is_some()),
        ("--config", args.config.is_some()),
        ("--out", args.out.is_some()),
        ("--seed", args.seed.is_some()),
        ("--roc", args.roc.is_some()),
        ("--no-roc", args.no_roc),
        ("--sft-steps", args.sft_steps.is_some()),
        ("--sft-threads", args.sft_threads.is_some()),
        ("--sft-micro-batches", args.sft_micro_batches.is_some()),
        ("--precision", args.precision.is_some()),
        ("--gradient-checkpointing", args.gradient_checkpointing),
        ("--lora", args.lora.lora.is_some()),
        ("--base-precision", args.lora.base_precision.is_some()),
        ("--model", args.model.is_some()),
        ("--data", args.data.is_some()),
        ("--rl-lr", args.rl_lr.is_some()),
        ("--rollout", args.rollout.is_some()),
        ("--verify", args.verify.is_some()),
        ("--tool-latency-budget", args.tool_latency_budget.is_some()),
        ("--engines", args.engines.is_some()),
        ("--engine-kind", args.engine_kind.is_some()),
        ("--publish-dir", args.publish_dir.is_some()),
        ("--publish-dtype", args.publish_dtype.is_some()),
        ("--publish-via", args.publish_via.is_some()),
        ("--publish-lora", args.publish_lora.is_some()),
        ("--rollout-correction", args.rollout_correction.is_some()),
        ("--max-staleness", args.max_staleness.is_some()),
        (
            "--rollout-is-threshold",
            args.rollout_is_threshold.is_some(),
        ),
        ("--dispatch", args.dispatch.is_some()),
        ("--record-entropy", args.record_entropy),
        ("--checkpoint-every", args.checkpoint_every.is_some()),
    ];
    for (flag, given) in flags {
        if given {
            set.push(flag);
        }
    }
    set
}

/// Runs `rstar train`.
pub fn run(args: Args) -> anyhow::Result<()> {
    if let Some(Action::Plot { run }) = &args.action {
        let files = trainer::plots::draw(run)
            .with_context(|| format!("plots of the run in {}", run.display()))?;
        for f in files {
            println!("{}", f.display());
        }
        return Ok(());
    }
    if let Some(Action::Tensorboard { run, out }) = &args.action {
        let dir = out.clone().unwrap_or_else(|| run.join("tb"));
        let (file, counts) = rstar_agent::analysis::tensorboard::convert(run, &dir)
            .with_context(|| format!("TensorBoard events of the run in {}", run.display()))?;
        eprintln!(
            "{} scalars and {} texts (`tensorboard --logdir {}`)",
            counts.scalars,
            counts.texts,
            dir.display()
        );
        println!("{}", file.display());
        return Ok(());
    }
    let device = device_of(&args.backend)?;
    let options = RunOptions {
        stop_after_sft_steps: args.stop_after_sft_steps,
        stop_after_rl_steps: args.stop_after_rl_steps,
        python: args.python.clone(),
        workers: args.workers,
        tool_servers: args.tools.clone(),
        tensorboard: args.tensorboard.clone(),
        verify: if args.no_verify {
            rstar_agent::policy::Verify::Skip
        } else {
            rstar_agent::policy::Verify::Digests
        },
        accept_edited_config: args.resume_with_edited_config,
    };
    let mut progress = Progress {
        tty: std::io::stderr().is_terminal(),
        bar: None,
    };
    let (report, out) = if let Some(dir) = &args.resume {
        let refused = config_flags(&args);
        if !refused.is_empty() {
            bail!(
                "--resume continues {} with the config saved there; {} would change it (start a new run with --out instead)",
                dir.display(),
                refused.join(", ")
            );
        }
        let report = trainer::resume(dir, &device, &options, &mut progress)
            .with_context(|| format!("resuming the training run in {}", dir.display()))?;
        (report, dir.clone())
    } else {
        let mut config = match &args.config {
            Some(path) => TrainConfig::from_json_file(path)?,
            None => TrainConfig::preset(args.preset.as_deref().unwrap_or("tiny"))?,
        };
        if let Some(seed) = args.seed {
            config.seed = seed;
        }
        if let Some(mode) = args.roc.or(args.no_roc.then_some(RocMode::Off)) {
            config.rl.roc.mode = mode;
        }
        if let Some(steps) = args.sft_steps {
            config.sft.steps = steps;
        }
        if let Some(threads) = args.sft_threads {
            config.sft.threads = threads;
        }
        if let Some(n) = args.sft_micro_batches {
            config.sft.micro_batches = n;
        }
        if let Some(precision) = args.precision {
            config.sft.precision = precision;
            config.rl.precision = precision;
        }
        if args.gradient_checkpointing {
            config.sft.gradient_checkpointing = true;
            config.rl.gradient_checkpointing = true;
        }
        if let Some(lora) = args.lora.config() {
            config.rl.lora = Some(lora);
        }
        if let Some(precision) = args.lora.base_precision {
            config.rl.base_precision = precision;
        }
        if let Some(dir) = &args.model {
            config.init = Some(dir.clone());
        }
        if let Some(file) = &args.data {
            config.data = Some(file.clone());
        }
        if let Some(lr) = args.rl_lr {
            config.rl.lr = lr;
        }
        if let Some(driver) = args.rollout {
            config.rl.rollout_driver = driver;
        }
        if let Some(verify) = args.verify {
            config.rl.verify = verify;
        }
        if let Some(budget) = args.tool_latency_budget {
            config.tools.latency_budget_secs = Some(budget);
        }
        if let Some(engines) = &args.engines {
            if engines.urls().is_some() && args.rollout.is_none() {
                config.rl.rollout_driver = RolloutDriver::Scheduled;
            }
            config.rl.engines = engines.clone();
        }
        if let Some(kind) = args.engine_kind {
            config.rl.engine_kind = Some(kind);
        }
        if let Some(dir) = &args.publish_dir {
            config.rl.publish_dir = Some(dir.clone());
        }
        if let Some(via) = args.publish_via {
            config.rl.publish_via = via;
        }
        if let Some(what) = args.publish_lora {
            config.rl.publish_lora = what;
        }
        if let Some(k) = args.max_staleness {
            config.rl.max_staleness = k;
        }
        let correction = &mut config.rl.grpo.rollout_correction;
        if let Some(level) = args.rollout_correction {
            correction.rollout_is = level.rollout_is();
        }
        if let Some(threshold) = args.rollout_is_threshold {
            anyhow::ensure!(
                correction.rollout_is.is_some(),
                "--rollout-is-threshold needs the correction on: add --rollout-correction token or sequence"
            );
            correction.rollout_is_threshold = threshold;
        }
        if let Some(dtype) = &args.publish_dtype {
            config.rl.publish_dtype = if dtype == "bf16" {
                rstar_agent::policy::WeightDtype::Bf16
            } else {
                rstar_agent::policy::WeightDtype::F32
            };
        }
        if let Some(policy) = args.dispatch {
            config.rl.dispatch = policy;
        }
        if args.record_entropy {
            config.record_entropy = true;
        }
        if let Some(every) = args.checkpoint_every {
            config.checkpoint_every = every;
        }
        if let Some(python) = &args.python {
            config.tools.python = python.clone();
        }
        if let Some(workers) = args.workers {
            config.tools.workers = workers;
        }
        if !args.tools.is_empty() {
            config.tools.servers = args.tools.clone();
        }
        if args.dry_run {
            println!("{}", serde_json::to_string_pretty(&config)?);
            config.validate()?;
            return Ok(());
        }
        config.validate()?;
        // Real problems: model code imports numpy and sympy, so a sandbox Python without them
        // stops the run before it trains on every `import` failing (the embedded tasks' code
        // imports nothing).
        if config.data.is_some() && config.tools.servers.is_empty() && !args.allow_missing_preload {
            let pool = rstar_agent::train::start_pool(&rstar_agent::train::ToolOptions {
                workers: 1,
                ..config.tools.clone()
            })
            .context("starting the tool sandbox (set --python or RSTAR_PYTHON)")?;
            crate::check_sandbox_modules(&pool, &config.tools.python)?;
        }
        let out = args.out.clone().unwrap_or_else(|| {
            PathBuf::from("runs").join(match config.rl.roc.mode {
                RocMode::Paper => config.preset.clone(),
                RocMode::Reference => format!("{}-roc-reference", config.preset),
                RocMode::Off => format!("{}-no-roc", config.preset),
            })
        });
        let report = trainer::run_with(&config, &out, &device, &options, &mut progress)
            .with_context(|| format!("training run in {}", out.display()))?;
        (report, out)
    };
    progress.finish();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
        println!(
            "sft {:.2} steps/s; rl {:.1}s/step, rollout {:.0} tokens/s; {} RL steps; {:.1}s; artefacts in {}{}",
            report.sft_steps_per_sec,
            report.rl_step_secs,
            report.rollout_tokens_per_sec,
            report.rl_steps,
            report.total_secs,
            out.display(),
            if report.finished {
                String::new()
            } else {
                format!(
                    " (stopped early: `rstar train --resume {}` continues)",
                    out.display()
                )
            }
        );
    }
    // The report page: its path on the last line (what `cargo xtask train` ends with).
    let page = out.join("report.html");
    match rstar_agent::analysis::report::write(std::slice::from_ref(&out), &page) {
        Ok(_) if args.json => eprintln!("report: {}", page.display()),
        Ok(_) => println!("report: {}", page.display()),
        Err(e) => eprintln!("report not written: {e}"),
    }
    Ok(())
}

/// `--rollout-correction`: where importance weights are computed, or none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CorrectionLevel {
    /// No correction.
    Off,
    /// One weight per token.
    Token,
    /// One weight per sequence.
    Sequence,
}

impl CorrectionLevel {
    fn rollout_is(self) -> Option<rstar_agent::grpo::RolloutIs> {
        match self {
            Self::Off => None,
            Self::Token => Some(rstar_agent::grpo::RolloutIs::Token),
            Self::Sequence => Some(rstar_agent::grpo::RolloutIs::Sequence),
        }
    }
}
