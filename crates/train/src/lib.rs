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
//! | `tb/events.out.tfevents.*` | TensorBoard events of every metrics line, evaluation and a few rollouts ([`rstar_analysis::tensorboard`]) |
//! | `checkpoints/<phase>/` | the policy after SFT and after each stage (`rstar_policy::save_dir`) |
//! | `checkpoints/last/` | the resumable state after the last SFT or RL step ([`checkpoint`]) |
//!
//! A resumed run continues bit for bit: the policy and AdamW's state are saved exactly, the SFT
//! batch generator is fast-forwarded, each RL step draws from a generator seeded by the step
//! number, the curriculum's state and the hard stage's problems are saved, and metrics lines
//! written after the checkpoint are dropped. Killing the process loses at most the current step.
//!
//! The building blocks are public: [`rstar_rollout`] for batched episodes,
//! [`sft`] for the corpus and the SFT loop, [`rl::step`] for one GRPO-RoC step, [`evaluate`].
//!
//! # Crate features
//! None. The Burn backend is `rstar-policy`'s feature (`flex`, `wgpu`, `cuda`, `tch`, and
//! `fusion`, `autotune` for the GPU ones): a binary enables it there, once for every crate.

pub mod chat_sft;
pub mod checkpoint;
pub mod config;
pub mod engines;
pub mod error;
mod evaluation;
mod observer;
pub mod optim;
mod phases;
mod problems;
mod report;
pub mod rl;
pub mod rl_async;
mod rl_engines;
mod rl_hard;
pub mod sft;
pub mod tools;

use rstar_episode::IoError;
use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::tensor::Device;

pub use rstar_analysis::plots;

pub use config::{
    Engines, EvalOptions, LrSchedule, PublishLora, PublishVia, RlOptions, RocMode, RocOptions,
    RolloutDriver, SftOptions, ToolOptions, TrainConfig, VerifyAt,
};

use self::checkpoint::Phase;
pub use crate::error::Error;
pub use evaluation::{Evaluation, evaluate, evaluate_with};
pub use observer::{LogLines, Observer, rl_line, sft_line, sft_logged};
pub use problems::template_for;
use problems::{problems, seed_of};
pub use report::TrainReport;
use report::report_from_files;

/// The lines of `eval.jsonl`: defined in `rstar-analysis`, which reads them back for the report.
pub use rstar_analysis::records::{EvalRow, SampledAt};

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

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io(IoError::new(path.to_path_buf(), source))
}

pub use rstar_rollout::tools::start_pool;

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
) -> Result<TrainReport, Error> {
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
) -> Result<TrainReport, Error> {
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
/// [`Error::Resume`] when `run` has no `config.json`; [`TrainConfig::from_json_file`]'s
/// errors.
pub fn run_config(run: &Path) -> Result<TrainConfig, Error> {
    let path = run.join("config.json");
    if !path.is_file() {
        return Err(Error::Resume {
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
/// [`Error::Resume`] naming the path when there is no config or no checkpoint; then
/// [`run`]'s errors.
pub fn resume(
    run: &Path,
    device: &Device,
    options: &RunOptions,
    observer: &mut dyn Observer,
) -> Result<TrainReport, Error> {
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
        return Err(Error::Resume {
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
) -> Result<(), Error> {
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
        return Err(Error::Resume {
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
