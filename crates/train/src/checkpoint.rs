//! Resumable checkpoints of a training run: `runs/<name>/checkpoints/last/`.
//!
//! The trainer writes one after every SFT step, after SFT's evaluation and after every RL
//! step. It holds everything the next step needs to continue bit for bit:
//!
//! | file | content |
//! |---|---|
//! | `state.json` | a [`ResumeState`]: phase, steps done, curriculum state, the hard stage's problems, the line counts of the metrics files, the parameter ids |
//! | `config.json`, `model.safetensors`, tokenizer | the policy (`rstar_policy::save_dir`, f32: exact) |
//! | `adapter_config.json`, `adapter_model.safetensors` | instead, in a LoRA phase: the adapters alone, in PEFT's layout (f32: exact); `state.json`'s `lora_base` names the frozen base and its weights' digest, checked on resume ([`load_base`]) |
//! | `optimizer.bpk` | AdamW's moments and step counts (Burn's burnpack record: raw f32 bytes, exact) |
//! | `checksums.sha256` | the SHA-256 of every other file (`rstar_policy::digest`; `sha256sum -c` reads it) |
//!
//! Writes are atomic: the new checkpoint is written to `last.tmp/`, the previous one is renamed
//! to `last.old/` and the new one to `last/`. `last.old/` stays until the next save, so a
//! checkpoint found unsound on resume (a file that no longer matches its digest, a state that
//! contradicts the metrics files) has a sound predecessor to fall back on: [`find_sound`]
//! takes `last/`, else `last.old/`, and says why.
//!
//! Burn's optimizer keys its state by parameter id, and a model loaded from safetensors gets
//! fresh ids: the ids are saved in `state.json` (in the order [`param_ids`] visits them) and
//! put back on the loaded model by [`with_param_ids`].

use rstar_episode::{IoError, LineError};
use std::path::{Path, PathBuf};

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::ModuleOptimizer;
use burn::tensor::{Device, Tensor};
use rstar_curriculum::CurriculumState;
use rstar_policy::{Qwen, Tokenizer, Verify, WeightDtype, save_dir};
use serde::{Deserialize, Serialize};

use crate::error::Error;
use rstar_rollout::Prompt;

/// The layout version of `state.json`.
pub const STATE_VERSION: u32 = 1;

/// Where a run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// SFT: `sft_steps` done; the optimizer is SFT's.
    Sft,
    /// SFT and its evaluation done, `rl_steps` RL steps done; the optimizer is RL's.
    Rl,
    /// Every stage done and the final artefacts written.
    Finished,
}

/// Line counts of the run's JSONL files at the checkpoint (lines after them are from a step
/// that did not finish and are truncated on resume).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Lines {
    /// `sft_metrics.jsonl`.
    pub sft_metrics: usize,
    /// `metrics.jsonl`.
    pub metrics: usize,
    /// `eval.jsonl`.
    pub eval: usize,
}

/// The problems of the current stage (a hard stage's are chosen by the policy when the stage
/// starts, so they are saved rather than recomputed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StagePool {
    /// The stage index.
    pub stage: usize,
    /// Its problems.
    pub prompts: Vec<Prompt>,
}

/// `checkpoints/last/state.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResumeState {
    /// [`STATE_VERSION`].
    pub version: u32,
    /// The phase.
    pub phase: Phase,
    /// SFT steps done.
    pub sft_steps: usize,
    /// RL steps done.
    pub rl_steps: u64,
    /// The curriculum's state (in [`Phase::Rl`] and later).
    pub curriculum: Option<CurriculumState>,
    /// The current stage's problems, once chosen.
    pub stage_pool: Option<StagePool>,
    /// Line counts of the metrics files.
    pub lines: Lines,
    /// The model's parameter ids in visiting order (the optimizer's keys).
    pub param_ids: Vec<u64>,
    /// The run's config when the checkpoint was written (`config.json` of the run directory),
    /// so a resume can tell that the file was edited since. Absent in older checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_config: Option<serde_json::Value>,
    /// A LoRA phase's frozen base: the checkpoint holds the adapters alone (PEFT's files) and
    /// is resumed over this model, refused when its weights' digest differs. Absent when the
    /// whole model is in the checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_base: Option<LoraBase>,
}

/// The frozen base a LoRA checkpoint's adapters sit on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoraBase {
    /// The base's model directory; a relative path is relative to the run directory.
    pub path: PathBuf,
    /// [`Qwen::base_digest`] of the base's weights (as loaded, before any bf16 rounding).
    pub digest: String,
    /// How the base holds its projection weights ([`Qwen::with_base_precision`]): `f32` (the
    /// default, and absent from states that leave it so) or `bf16`.
    #[serde(default, skip_serializing_if = "crate::config::is_f32")]
    pub precision: rstar_policy::Precision,
}

impl LoraBase {
    /// The base's directory, a relative `path` resolved against `run`.
    pub fn dir(&self, run: &Path) -> PathBuf {
        if self.path.is_relative() {
            run.join(&self.path)
        } else {
            self.path.clone()
        }
    }
}

/// The checkpoint directory of a run.
pub fn dir_of(run: &Path) -> PathBuf {
    run.join("checkpoints").join("last")
}

fn sibling(dir: &Path, suffix: &str) -> PathBuf {
    let mut name = dir.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    dir.with_file_name(name)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io(IoError::new(path.to_path_buf(), source))
}

fn resume_err(path: &Path, message: impl Into<String>) -> Error {
    Error::Resume {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Collects parameter ids in visiting order.
struct CollectIds(Vec<u64>);

impl ModuleVisitor for CollectIds {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0.push(param.id.val());
    }
}

/// Puts saved ids back, in visiting order.
struct AssignIds<'a> {
    ids: &'a [u64],
    next: usize,
}

impl ModuleMapper for AssignIds<'_> {
    fn map_float<const D: usize>(&mut self, mut param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        if let Some(&id) = self.ids.get(self.next) {
            param.id = ParamId::from(id);
        }
        self.next += 1;
        param
    }
}

/// The ids of `model`'s float parameters in visiting order.
pub fn param_ids(model: &Qwen) -> Vec<u64> {
    let mut ids = CollectIds(Vec::new());
    model.visit(&mut ids);
    ids.0
}

/// `model` with its parameter ids replaced by `ids` (visiting order), so that an optimizer
/// record saved with the original model applies to it.
///
/// # Errors
/// [`Error::Resume`] (naming `path`) when the model has a different number of parameters.
pub fn with_param_ids(model: Qwen, ids: &[u64], path: &Path) -> Result<Qwen, Error> {
    let have = param_ids(&model).len();
    if have != ids.len() {
        return Err(resume_err(
            path,
            format!(
                "the checkpoint's model has {have} parameter tensors, `param_ids` lists {}",
                ids.len()
            ),
        ));
    }
    let mut mapper = AssignIds { ids, next: 0 };
    Ok(model.map(&mut mapper))
}

/// Writes a checkpoint into `dir` atomically (see the module docs), synced to disk before it
/// replaces the previous one.
///
/// # Errors
/// IO and policy errors naming the file.
pub fn save(
    dir: &Path,
    state: &ResumeState,
    model: &Qwen,
    tokenizer: &Tokenizer,
    optimizer: &ModuleOptimizer,
) -> Result<(), Error> {
    let tmp = sibling(dir, ".tmp");
    let old = sibling(dir, ".old");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
    }
    std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
    match &state.lora_base {
        // The adapters alone, in PEFT's layout (f32: exact); the base stays where it is.
        Some(base) => {
            rstar_policy::lora::save_adapter(model, &tmp, &base.path.to_string_lossy())?;
        }
        None => save_dir(&model.valid(), tokenizer, &tmp, WeightDtype::F32)?,
    }
    let opt_path = tmp.join("optimizer.bpk");
    optimizer
        .save(&opt_path)
        .map_err(|e| resume_err(&opt_path, format!("cannot write the optimizer state: {e}")))?;
    let state_path = tmp.join("state.json");
    std::fs::write(&state_path, serde_json::to_string_pretty(state)? + "\n")
        .map_err(io(&state_path))?;
    // Every file's digest, checked on resume.
    rstar_policy::write_digests(&tmp)?;
    // On disk before the renames, so that a power loss after them cannot leave empty files in
    // the only checkpoint left.
    sync_tree(&tmp)?;
    if dir.exists() {
        if old.exists() {
            std::fs::remove_dir_all(&old).map_err(io(&old))?;
        }
        std::fs::rename(dir, &old).map_err(io(dir))?;
    }
    std::fs::rename(&tmp, dir).map_err(io(&tmp))?;
    if let Some(parent) = dir.parent() {
        sync_path(parent)?;
    }
    Ok(())
}

/// `fsync` of a file or a directory (a directory's entries: creations and renames).
fn sync_path(path: &Path) -> Result<(), Error> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io(path))
}

/// `fsync` of every file in `dir` (one level: checkpoints are flat) and of `dir` itself.
fn sync_tree(dir: &Path) -> Result<(), Error> {
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        if path.is_file() {
            sync_path(&path)?;
        }
    }
    sync_path(dir)
}

/// The complete checkpoint of a run: `last/`, or `last.old/` when a kill came between the
/// renames of [`save`]; `None` when there is none.
pub fn find(run: &Path) -> Option<PathBuf> {
    let dir = dir_of(run);
    let old = sibling(&dir, ".old");
    [dir, old]
        .into_iter()
        .find(|d| d.join("state.json").is_file())
}

/// A checkpoint [`find_sound`] chose.
#[derive(Debug, Clone)]
pub struct Found {
    /// The checkpoint directory (`last/` or `last.old/`).
    pub dir: PathBuf,
    /// Its state.
    pub state: ResumeState,
    /// Why `last/` was passed over for `last.old/`, when it was.
    pub fallback: Option<String>,
}

/// The newest sound checkpoint of a run: `last/`, else `last.old/` (the previous one, or the
/// only one when a kill came between the renames of [`save`]). Sound means: `state.json`
/// reads, every file matches `checksums.sha256` (unless `verify` is [`Verify::Skip`]) and the
/// state agrees with the run's metrics files ([`validate_state`]). `None` when the run has no
/// checkpoint at all.
///
/// # Errors
/// `last/`'s own problem (naming the file) when neither is sound.
pub fn find_sound(run: &Path, verify: Verify) -> Result<Option<Found>, Error> {
    let dir = dir_of(run);
    let old = sibling(&dir, ".old");
    let mut first_error: Option<Error> = None;
    for candidate in [dir, old] {
        if !candidate.join("state.json").is_file() {
            continue;
        }
        match sound(run, &candidate, verify) {
            Ok(state) => {
                let fallback = first_error.take().map(|e| e.to_string());
                return Ok(Some(Found {
                    dir: candidate,
                    state,
                    fallback,
                }));
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(None),
    }
}

/// The state of `dir` when it is sound (see [`find_sound`]).
fn sound(run: &Path, dir: &Path, verify: Verify) -> Result<ResumeState, Error> {
    if verify == Verify::Digests {
        rstar_policy::verify_digests(dir)?;
    }
    let state = read_state(dir)?;
    validate_state(&state, run, &dir.join("state.json"))?;
    Ok(state)
}

/// Checks that a checkpoint's state agrees with what the run wrote: one line of
/// `sft_metrics.jsonl` per SFT step, one line of `metrics.jsonl` per RL step, the curriculum
/// at the same step, and the metrics files at least as long as the state counts.
///
/// # Errors
/// [`Error::Resume`] naming `state.json` and the field.
pub fn validate_state(state: &ResumeState, run: &Path, path: &Path) -> Result<(), Error> {
    if state.lines.sft_metrics != state.sft_steps {
        return Err(resume_err(
            path,
            format!(
                "`sft_steps` is {} but `lines.sft_metrics` counts {} SFT steps logged",
                state.sft_steps, state.lines.sft_metrics
            ),
        ));
    }
    if state.lines.metrics as u64 != state.rl_steps {
        return Err(resume_err(
            path,
            format!(
                "`rl_steps` is {} but `lines.metrics` counts {} RL steps logged",
                state.rl_steps, state.lines.metrics
            ),
        ));
    }
    if let Some(c) = &state.curriculum
        && c.total_step != state.rl_steps
    {
        return Err(resume_err(
            path,
            format!(
                "`rl_steps` is {} but `curriculum.total_step` is {}",
                state.rl_steps, c.total_step
            ),
        ));
    }
    for (file, lines) in [
        ("sft_metrics.jsonl", state.lines.sft_metrics),
        ("metrics.jsonl", state.lines.metrics),
        ("eval.jsonl", state.lines.eval),
    ] {
        let path_of = run.join(file);
        let have = if path_of.exists() {
            std::fs::read_to_string(&path_of)
                .map_err(io(&path_of))?
                .lines()
                .count()
        } else {
            0
        };
        if have < lines {
            return Err(resume_err(
                path,
                format!("counts {lines} lines of {file}, which has {have}"),
            ));
        }
    }
    Ok(())
}

/// The dotted paths (`rl.lr`) at which two JSON values differ, each with both values, in
/// field order; `ignore` lists paths not compared.
pub fn json_differences(
    before: &serde_json::Value,
    after: &serde_json::Value,
    ignore: &[&str],
) -> Vec<String> {
    fn walk(
        path: &str,
        a: &serde_json::Value,
        b: &serde_json::Value,
        ignore: &[&str],
        out: &mut Vec<String>,
    ) {
        if ignore.contains(&path) {
            return;
        }
        match (a, b) {
            (serde_json::Value::Object(x), serde_json::Value::Object(y)) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.dedup();
                let mut seen = std::collections::BTreeSet::new();
                for k in keys {
                    if !seen.insert(k) {
                        continue;
                    }
                    let sub = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    let null = serde_json::Value::Null;
                    walk(
                        &sub,
                        x.get(k).unwrap_or(&null),
                        y.get(k).unwrap_or(&null),
                        ignore,
                        out,
                    );
                }
            }
            _ if a == b => {}
            _ => out.push(format!("`{path}` {a} -> {b}")),
        }
    }
    let mut out = Vec::new();
    walk("", before, after, ignore, &mut out);
    out
}

/// Reads `state.json` of a checkpoint.
///
/// # Errors
/// IO errors, [`Error::Dataset`] naming the line of a malformed file,
/// [`Error::Resume`] for another layout version.
pub fn read_state(dir: &Path) -> Result<ResumeState, Error> {
    let path = dir.join("state.json");
    let text = std::fs::read_to_string(&path).map_err(io(&path))?;
    let state: ResumeState = serde_json::from_str(&text)
        .map_err(|e| Error::Dataset(LineError::new(path.clone(), e.line(), e.to_string())))?;
    if state.version != STATE_VERSION {
        return Err(resume_err(
            &path,
            format!(
                "`version` is {}, this build reads {STATE_VERSION}",
                state.version
            ),
        ));
    }
    Ok(state)
}

/// Loads a checkpoint's policy onto `device` with the saved parameter ids, its tokenizer, and
/// the optimizer state into `optimizer` (a fresh one of the right kind). A LoRA checkpoint's
/// adapters are put on its base (`state.lora_base`, relative to `run`), whose digest must match.
///
/// # Errors
/// IO, policy and record errors naming the file; [`Error::Resume`] naming both digests when
/// the base is not the one the adapters were trained on.
pub fn load(
    run: &Path,
    dir: &Path,
    state: &ResumeState,
    device: &Device,
    optimizer: ModuleOptimizer,
) -> Result<(Qwen, Tokenizer, ModuleOptimizer), Error> {
    // The digests were checked by `find_sound`; the weights' finiteness is checked here.
    let (model, tokenizer) = match &state.lora_base {
        None => rstar_policy::load_dir_with(dir, device, Verify::Skip)?,
        Some(base) => {
            let (model, tokenizer) = load_base(run, base, device)?;
            let model = rstar_policy::lora::load_adapter(model, dir)?
                .with_base_precision(base.precision)?;
            (model, tokenizer)
        }
    };
    let model = with_param_ids(model, &state.param_ids, &dir.join("state.json"))?;
    let opt_path = dir.join("optimizer.bpk");
    let optimizer = optimizer
        .load(&opt_path)
        .map_err(|e| resume_err(&opt_path, format!("cannot read the optimizer state: {e}")))?;
    Ok((model, tokenizer, optimizer))
}

/// Loads a LoRA phase's base model (its directory's digests checked) and checks that its
/// weights are the ones the adapters were trained on.
///
/// # Errors
/// Policy errors naming the file; [`Error::Resume`] naming both digests on a mismatch.
pub fn load_base(run: &Path, base: &LoraBase, device: &Device) -> Result<(Qwen, Tokenizer), Error> {
    let path = base.dir(run);
    let (model, tokenizer) = rstar_policy::load_dir(&path, device)?;
    let digest = model.base_digest()?;
    if digest != base.digest {
        return Err(resume_err(
            &path,
            format!(
                "is not the base the checkpoint's LoRA adapters were trained on: its weights' digest is {digest}, the checkpoint's `lora_base.digest` is {} (restore that model, or start a new run)",
                base.digest
            ),
        ));
    }
    Ok((model, tokenizer))
}

/// Keeps the first `lines` lines of a JSONL file (what a checkpoint saw) and drops the rest.
///
/// # Errors
/// IO errors; [`Error::Resume`] when the file has fewer lines than the checkpoint counted.
pub fn truncate_lines(path: &Path, lines: usize) -> Result<(), Error> {
    let text = if path.exists() {
        std::fs::read_to_string(path).map_err(io(path))?
    } else {
        String::new()
    };
    let kept: Vec<&str> = text.lines().take(lines).collect();
    if kept.len() < lines {
        return Err(resume_err(
            path,
            format!(
                "has {} lines, the checkpoint counted {lines}",
                text.lines().count()
            ),
        ));
    }
    let mut out = kept.join("\n");
    if !kept.is_empty() {
        out.push('\n');
    }
    if out.len() != text.len() {
        // Through a temporary file, so that a kill now leaves the old file or the new one.
        let tmp = sibling(path, ".tmp");
        std::fs::write(&tmp, out).map_err(io(&tmp))?;
        sync_path(&tmp)?;
        std::fs::rename(&tmp, path).map_err(io(path))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_the_counted_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.jsonl");
        std::fs::write(&path, "a\nb\nc\n{\"partial").unwrap();
        truncate_lines(&path, 2).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a\nb\n");
        truncate_lines(&path, 0).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        let err = truncate_lines(&path, 1).unwrap_err().to_string();
        assert!(
            err.contains("m.jsonl") && err.contains("counted 1"),
            "{err}"
        );
    }

    #[test]
    fn issue_42_config_differences_name_the_dotted_fields() {
        let a = serde_json::json!({"rl": {"lr": 1e-6, "group_size": 8}, "tools": {"python": "a"}, "seed": 0});
        let b = serde_json::json!({"rl": {"lr": 0.5, "group_size": 8, "new": true}, "tools": {"python": "b"}, "seed": 0});
        assert_eq!(
            json_differences(&a, &b, &["tools.python"]),
            vec![
                format!("`rl.lr` {} -> 0.5", a["rl"]["lr"]),
                "`rl.new` null -> true".to_string()
            ]
        );
        assert!(json_differences(&a, &a, &[]).is_empty());
        assert_eq!(json_differences(&a, &b, &[]).len(), 3);
    }

    #[test]
    fn issue_42_a_state_that_contradicts_the_metrics_files_is_refused() {
        let run = tempfile::tempdir().unwrap();
        std::fs::write(run.path().join("sft_metrics.jsonl"), "{}\n{}\n").unwrap();
        std::fs::write(run.path().join("metrics.jsonl"), "{}\n").unwrap();
        let state = ResumeState {
            version: STATE_VERSION,
            phase: Phase::Rl,
            sft_steps: 2,
            rl_steps: 1,
            curriculum: None,
            stage_pool: None,
            lines: Lines {
                sft_metrics: 2,
                metrics: 1,
                eval: 0,
            },
            param_ids: Vec::new(),
            run_config: None,
            lora_base: None,
        };
        let path = run.path().join("state.json");
        validate_state(&state, run.path(), &path).unwrap();
        let check = |state: &ResumeState, needle: &str| {
            let err = validate_state(state, run.path(), &path)
                .unwrap_err()
                .to_string();
            assert!(err.contains("state.json") && err.contains(needle), "{err}");
        };
        check(
            &ResumeState {
                rl_steps: 999,
                ..state.clone()
            },
            "`rl_steps` is 999",
        );
        check(
            &ResumeState {
                sft_steps: 3,
                ..state.clone()
            },
            "`sft_steps` is 3",
        );
        let mut longer = state.clone();
        longer.rl_steps = 2;
        longer.lines.metrics = 2;
        check(&longer, "counts 2 lines of metrics.jsonl, which has 1");
    }

    #[test]
    fn ids_survive_a_save_and_load() {
        let device = Device::flex().autodiff();
        let tokenizer = Tokenizer::char();
        let config = rstar_policy::QwenConfig::test_tiny(tokenizer.vocab_size());
        let model = Qwen::random(config, 3, &device).unwrap();
        let ids = param_ids(&model);
        let dir = tempfile::tempdir().unwrap();
        save_dir(&model.valid(), &tokenizer, dir.path(), WeightDtype::F32).unwrap();
        let loaded = rstar_policy::load_model(dir.path(), &device).unwrap();
        assert_ne!(param_ids(&loaded), ids);
        let loaded = with_param_ids(loaded, &ids, dir.path()).unwrap();
        assert_eq!(param_ids(&loaded), ids);
        let err = with_param_ids(model, &ids[1..], dir.path()).unwrap_err();
        assert!(err.to_string().contains("parameter tensors"), "{err}");
    }
}
