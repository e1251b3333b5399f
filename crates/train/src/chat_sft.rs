//! The paper's first step on a real model: non-reasoning SFT on conversation datasets
//! (`rstar sft`).
//!
//! Rows of `messages` (OpenAI / HF chat layout, assistant `tool_calls`, `tool` messages, a
//! `tools` list) are rendered with the model's chat template
//! ([`rstar_episode::chat::ChatFormat`], detected from `tokenizer_config.json`) and tokenized
//! whole; the loss is taken on the assistant tokens only (content, tool calls and the closing
//! `<|im_end|>`), never on the prompt, system or tool turns.
//!
//! Several files are mixed by weight ([`DataSpec`]: `a.jsonl:0.75`), shuffled with the seed
//! every epoch; a global batch ([`ChatSftConfig::global_batch`], the paper's 128) is reached by
//! gradient accumulation over micro-batches of similar lengths holding at most
//! [`ChatSftConfig::micro_batch_tokens`] padded tokens each, so long and short examples do not
//! pad each other. The loss of a step is the mean over all assistant tokens of the global
//! batch. A validation split ([`ChatSftConfig::val_fraction`]) is held out and its loss
//! logged. Bad rows (an unknown role, tool-call arguments that are not JSON, an example longer
//! than the context) are reported with their file and line and, as
//! [`ChatSftConfig::bad_rows`] says, stop the run, or are dropped or truncated; never
//! silently.
//!
//! The run directory holds `config.json`, `sft_metrics.jsonl`, `bad_rows.jsonl`,
//! `checkpoints/last/` (resumable with [`resume`]) and, at the end, `model/`: an HF directory
//! (`config.json`, `model.safetensors`, `tokenizer.json` and the input model's
//! `tokenizer_config.json` and `generation_config.json`) that `rstar train --preset
//! rstar2-agent --model` takes as is.

use rstar_episode::{IoError, LineError};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Instant;

use burn::module::Module;
use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::tensor::Device;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use rstar_episode::chat::{ChatFormat, RenderedChat};
use rstar_policy::{Qwen, Tokenizer, WeightDtype, save_dir};
use rstar_tasks::conversations::read_conversations_limited;
use serde::{Deserialize, Serialize};

use crate::checkpoint::{self, Lines, Phase, ResumeState, STATE_VERSION};
use crate::config::LrSchedule;
use crate::error::Error;
use crate::optim::{adamw, clip_global_norm, lr_at, summed_nll};

/// One data file and its mixing weight (`path` or `path:weight`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataSpec {
    /// The JSONL or parquet file.
    pub path: PathBuf,
    /// Its share of every epoch, relative to the other files' weights.
    pub weight: f64,
}

impl FromStr for DataSpec {
    type Err = String;

    /// `file.jsonl` (weight 1) or `file.jsonl:0.75`; a suffix after the last `:` that is not a
    /// number is part of the path.
    fn from_str(s: &str) -> Result<Self, String> {
        if let Some((path, w)) = s.rsplit_once(':')
            && let Ok(weight) = w.parse::<f64>()
        {
            if !(weight.is_finite() && weight > 0.0) {
                return Err(format!("{s}: the weight {w} is not a positive number"));
            }
            return Ok(DataSpec {
                path: path.into(),
                weight,
            });
        }
        Ok(DataSpec {
            path: s.into(),
            weight: 1.0,
        })
    }
}

/// What happens to a bad row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BadRows {
    /// Report them all and stop before training.
    #[default]
    Fail,
    /// Report them and train on the rest.
    Drop,
    /// As `drop`, but cut examples longer than the context to `max_len` tokens when the cut
    /// keeps some assistant tokens.
    Truncate,
}

impl FromStr for BadRows {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fail" => Ok(BadRows::Fail),
            "drop" => Ok(BadRows::Drop),
            "truncate" => Ok(BadRows::Truncate),
            other => Err(format!(
                "unknown bad-row policy {other:?}: expected fail, drop or truncate"
            )),
        }
    }
}

/// Everything a conversation SFT run depends on; saved as `config.json` in the run directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatSftConfig {
    /// The preset this started from.
    pub preset: String,
    /// The HF model directory to fine-tune.
    pub model: PathBuf,
    /// The data files and their weights.
    pub data: Vec<DataSpec>,
    /// The chat template (`qwen3`); `None` detects it from the model's `tokenizer_config.json`.
    pub chat_format: Option<String>,
    /// Seeds the split, the mixing and the order.
    pub seed: u64,
    /// Passes over the data.
    pub epochs: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Warm-up as a share of all optimizer steps.
    pub warmup_ratio: f64,
    /// Schedule after warm-up.
    pub schedule: LrSchedule,
    /// The cosine's floor as a share of `lr`.
    pub min_lr_ratio: f64,
    /// AdamW's decoupled weight decay.
    pub weight_decay: f32,
    /// Global gradient-norm clip.
    pub grad_clip: Option<f32>,
    /// Examples per optimizer step.
    pub global_batch: usize,
    /// Padded tokens per micro-batch (a micro-batch holds at least one example).
    pub micro_batch_tokens: usize,
    /// The context: longer examples are bad rows.
    pub max_len: usize,
    /// Share of the rows held out for the validation loss.
    pub val_fraction: f64,
    /// Validation loss every this many steps (and after the last); 0: only after the last.
    pub eval_every: usize,
    /// Checkpoint every this many steps (and after the last).
    pub checkpoint_every: usize,
    /// What to do with bad rows.
    pub bad_rows: BadRows,
    /// Compute precision: `f32` (the default, and absent from older configs) or `bf16` (bf16
    /// compute over f32 master weights and optimizer state, [`rstar_policy::Precision`]).
    #[serde(default)]
    pub precision: rstar_policy::Precision,
    /// Train LoRA adapters over the frozen `model` instead of every weight (`--lora RANK`,
    /// [`rstar_policy::lora`]): checkpoints hold the adapters alone, and the run ends with the
    /// adapter (`adapter/`, PEFT's layout) and the merged model (`model/`). Absent (and absent
    /// from older configs): full fine-tuning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<rstar_policy::LoraConfig>,
    /// How `lora`'s frozen base holds its seven projection weights: `f32` (the default, and
    /// absent from configs that leave it so) or `bf16` (`--base-precision bf16`: half their
    /// bytes, [`rstar_policy::Qwen::with_base_precision`]). Needs `lora`.
    #[serde(default, skip_serializing_if = "crate::config::is_f32")]
    pub base_precision: rstar_policy::Precision,
    /// Recompute each decoder layer in the backward pass instead of keeping its activations
    /// (`--gradient-checkpointing`, [`rstar_policy::Qwen::with_gradient_checkpointing`]). Off
    /// (and absent from configs that leave it off) by default.
    #[serde(default, skip_serializing_if = "crate::config::is_false")]
    pub gradient_checkpointing: bool,
}

impl ChatSftConfig {
    /// The paper's non-reasoning SFT (`rstar2-agent-sft`): 3 epochs, lr 5e-6, 4% warm-up then
    /// cosine, global batch 128, an 8192-token context, 1% held out.
    pub fn rstar2_agent_sft(model: PathBuf, data: Vec<DataSpec>) -> Self {
        ChatSftConfig {
            preset: "rstar2-agent-sft".into(),
            model,
            data,
            chat_format: None,
            seed: 0,
            epochs: 3,
            lr: 5e-6,
            warmup_ratio: 0.04,
            schedule: LrSchedule::Cosine,
            min_lr_ratio: 0.0,
            weight_decay: 0.0,
            grad_clip: Some(1.0),
            global_batch: 128,
            micro_batch_tokens: 16_384,
            max_len: 8192,
            val_fraction: 0.01,
            eval_every: 50,
            checkpoint_every: 50,
            bad_rows: BadRows::Fail,
            precision: rstar_policy::Precision::F32,
            lora: None,
            base_precision: rstar_policy::Precision::F32,
            gradient_checkpointing: false,
        }
    }

    /// Checks every field, naming the first bad one.
    ///
    /// # Errors
    /// [`Error::TrainConfig`].
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |field: &str, message: String| {
            Err(Error::TrainConfig {
                field: field.into(),
                message,
            })
        };
        if let Some(lora) = &self.lora {
            // `lora.rank`, as the config names it.
            lora.validate().map_err(|e| match e {
                rstar_policy::Error::InvalidConfig { field, reason } => Error::TrainConfig {
                    field,
                    message: reason,
                },
                other => Error::TrainConfig {
                    field: "lora".into(),
                    message: other.to_string(),
                },
            })?;
        }
        if self.base_precision == rstar_policy::Precision::Bf16 && self.lora.is_none() {
            return bad(
                "base_precision",
                "is bf16, which needs `lora` (--lora RANK): without adapters the projections train, and bf16 weights lose every update smaller than about 1/256 of the weight (for bf16 compute over f32 weights, set `precision`)".into(),
            );
        }
        if self.data.is_empty() {
            return bad(
                "data",
                "is empty: give at least one conversation file".into(),
            );
        }
        for (field, v) in [
            ("epochs", self.epochs),
            ("global_batch", self.global_batch),
            ("micro_batch_tokens", self.micro_batch_tokens),
            ("max_len", self.max_len),
            ("checkpoint_every", self.checkpoint_every),
        ] {
            if v == 0 {
                return bad(field, "is 0, expected at least 1".into());
            }
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad("lr", format!("is {}, expected a positive number", self.lr));
        }
        for (field, v) in [
            ("warmup_ratio", self.warmup_ratio),
            ("min_lr_ratio", self.min_lr_ratio),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return bad(field, format!("is {v}, expected a number in [0, 1]"));
            }
        }
        if !(0.0..0.5).contains(&self.val_fraction) {
            return bad(
                "val_fraction",
                format!("is {}, expected a number in [0, 0.5)", self.val_fraction),
            );
        }
        if let Some(name) = &self.chat_format
            && ChatFormat::from_name(name).is_none()
        {
            return bad("chat_format", format!("is {name:?}, expected qwen3"));
        }
        Ok(())
    }
}

/// One tokenized example.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRow {
    /// Where it came from (`file:line`).
    pub at: String,
    /// Token ids of the whole rendered conversation.
    pub ids: Vec<u32>,
    /// 1 on assistant tokens, 0 elsewhere.
    pub weights: Vec<f32>,
}

/// A row left out (or cut), and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadRow {
    /// `file:line` or `file: row N`.
    pub at: String,
    /// What is wrong, naming the field.
    pub reason: String,
    /// Whether it was truncated and kept rather than dropped.
    #[serde(default)]
    pub truncated: bool,
}

/// The data of a run, ready to train on.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Training rows, per data file.
    pub train: Vec<Vec<ChatRow>>,
    /// The validation split.
    pub val: Vec<ChatRow>,
    /// Every bad row (dropped, or truncated and kept).
    pub bad: Vec<BadRow>,
    /// The chat template used.
    pub format: ChatFormat,
}

/// The chat template of a model directory: `name` when given, else detected from its
/// `tokenizer_config.json`.
///
/// # Errors
/// [`Error::TrainConfig`] (`chat_format`) when there is no template or an unsupported
/// one.
pub fn chat_format_of(model: &Path, name: Option<&str>) -> Result<ChatFormat, Error> {
    let bad = |message: String| Error::TrainConfig {
        field: "chat_format".into(),
        message,
    };
    if let Some(name) = name {
        return ChatFormat::from_name(name).ok_or_else(|| bad(format!("{name:?} is not qwen3")));
    }
    let path = model.join("tokenizer_config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        bad(format!(
            "cannot read {} ({e}): name the template with --chat-format qwen3",
            path.display()
        ))
    })?;
    let config: serde_json::Value = serde_json::from_str(&text)?;
    let template = config
        .get("chat_template")
        .and_then(serde_json::Value::as_str)
        .ok_or_else(|| bad(format!("{} has no chat_template", path.display())))?;
    ChatFormat::detect(template).ok_or_else(|| {
        bad(format!(
            "the chat_template of {} is not one rstar renders (Qwen3's); --chat-format qwen3 uses Qwen3's anyway",
            path.display()
        ))
    })
}

/// Tokenizes a rendered conversation: ids of the whole text, weight 1 on tokens that start
/// inside an assistant span.
///
/// # Errors
/// Tokenizer errors.
pub fn tokenize_chat(
    rendered: &RenderedChat,
    tokenizer: &Tokenizer,
) -> Result<(Vec<u32>, Vec<f32>), Error> {
    let (ids, offsets) = tokenizer.encode_with_offsets(&rendered.text)?;
    let weights = offsets
        .iter()
        .map(|&(start, _)| {
            f32::from(u8::from(
                rendered.assistant.iter().any(|s| s.contains(&start)),
            ))
        })
        .collect();
    Ok((ids, weights))
}

/// The most bytes a row may have before it is a bad row unread (`rstar sft`'s bound before
/// tokenization): only rows that cannot fit `max_len` tokens are over it. No token of a
/// real vocabulary is longer than 256 bytes, and JSON escapes at most six bytes for one of
/// text (`\u00e9`), so a row over `max_len · 256 · 6` bytes (plus 1 MiB for the keys) has
/// more than `max_len` tokens. Such a row is dropped even with `--bad-rows truncate`.
pub fn max_row_bytes(max_len: usize) -> usize {
    max_len.saturating_mul(256 * 6).saturating_add(1 << 20)
}

/// Reads, renders and tokenizes every file, splits off the validation rows and collects the
/// bad rows.
///
/// # Errors
/// Unreadable files; [`Error::TrainConfig`] (`bad_rows`) listing the bad rows when
/// [`BadRows::Fail`]; no rows left to train on.
pub fn prepare(
    config: &ChatSftConfig,
    tokenizer: &Tokenizer,
    format: ChatFormat,
) -> Result<Prepared, Error> {
    let mut train = Vec::new();
    let mut bad = Vec::new();
    for spec in &config.data {
        let mut rows = Vec::new();
        for row in read_conversations_limited(&spec.path, max_row_bytes(config.max_len))? {
            let at = row.at.to_string();
            let conv = match row.conversation {
                Ok(c) => c,
                Err(reason) => {
                    bad.push(BadRow {
                        at,
                        reason,
                        truncated: false,
                    });
                    continue;
                }
            };
            let (mut ids, mut weights) = tokenize_chat(&format.render(&conv), tokenizer)?;
            if ids.len() > config.max_len {
                let reason = format!(
                    "{} tokens, longer than the context (max_len {})",
                    ids.len(),
                    config.max_len
                );
                let keeps_some = weights[..config.max_len].iter().skip(1).any(|&w| w > 0.0);
                let truncated = config.bad_rows == BadRows::Truncate && keeps_some;
                bad.push(BadRow {
                    at: at.clone(),
                    reason,
                    truncated,
                });
                if !truncated {
                    continue;
                }
                ids.truncate(config.max_len);
                weights.truncate(config.max_len);
            }
            rows.push(ChatRow { at, ids, weights });
        }
        train.push(rows);
    }
    if config.bad_rows == BadRows::Fail && !bad.is_empty() {
        let listed: Vec<String> = bad
            .iter()
            .take(20)
            .map(|b| format!("  {}: {}", b.at, b.reason))
            .collect();
        let more = bad.len().saturating_sub(20);
        return Err(Error::TrainConfig {
            field: "bad_rows".into(),
            message: format!(
                "{} bad rows (pass --bad-rows drop or truncate to train without them):\n{}{}",
                bad.len(),
                listed.join("\n"),
                if more > 0 {
                    format!("\n  … and {more} more")
                } else {
                    String::new()
                }
            ),
        });
    }
    // The validation split: the same share of every file, chosen with the seed.
    let mut rng = ChaCha8Rng::seed_from_u64(mix(config.seed, 1));
    let mut val = Vec::new();
    for rows in &mut train {
        rows.shuffle(&mut rng);
        let n_val = (config.val_fraction * rows.len() as f64).round() as usize;
        let n_val = if config.val_fraction > 0.0 && rows.len() >= 2 {
            n_val.max(1)
        } else {
            n_val
        };
        val.extend(rows.drain(..n_val));
        // Back in file order, so the plan depends on the seed only through its own shuffle.
        rows.sort_by_key(|r| (r.at.len(), r.at.clone()));
    }
    if train.iter().all(Vec::is_empty) {
        return Err(Error::TrainConfig {
            field: "data".into(),
            message: "no rows left to train on".into(),
        });
    }
    Ok(Prepared {
        train,
        val,
        bad,
        format,
    })
}

fn mix(seed: u64, stream: u64) -> u64 {
    rstar_rollout::mix_seed(seed, stream)
}

/// The order of one epoch: `(file, row)` pairs. Each file contributes its weight's share of
/// the epoch (`round(w / Σw · N)` of `N` = all training rows; a file with fewer rows than its
/// share is cycled), reshuffled every epoch.
pub fn epoch_order(
    train: &[Vec<ChatRow>],
    weights: &[f64],
    seed: u64,
    epoch: usize,
) -> Vec<(usize, usize)> {
    let total: usize = train.iter().map(Vec::len).sum();
    let wsum: f64 = weights.iter().sum();
    let mut rng = ChaCha8Rng::seed_from_u64(mix(seed, 1000 + epoch as u64));
    let mut order = Vec::new();
    for (f, rows) in train.iter().enumerate() {
        if rows.is_empty() {
            continue;
        }
        let want = (weights[f] / wsum * total as f64).round() as usize;
        let mut idx: Vec<usize> = (0..rows.len()).collect();
        idx.shuffle(&mut rng);
        order.extend(idx.iter().cycle().take(want).map(|&r| (f, r)));
    }
    order.shuffle(&mut rng);
    order
}

/// Splits a global batch into micro-batches of similar lengths: longest first, each holding
/// rows while `rows × longest ≤ max_tokens` (at least one row).
pub fn micro_batches<'a>(batch: &[&'a ChatRow], max_tokens: usize) -> Vec<Vec<&'a ChatRow>> {
    let mut sorted = batch.to_vec();
    sorted.sort_by_key(|r| std::cmp::Reverse(r.ids.len()));
    let mut out: Vec<Vec<&ChatRow>> = Vec::new();
    for row in sorted {
        match out.last_mut() {
            Some(mb) if (mb.len() + 1) * mb[0].ids.len() <= max_tokens => mb.push(row),
            _ => out.push(vec![row]),
        }
    }
    out
}

/// Assistant tokens whose prediction is in the loss (the first token predicts nothing).
fn loss_tokens(row: &ChatRow) -> usize {
    row.weights.iter().skip(1).filter(|&&w| w > 0.0).count()
}

/// [`summed_nll`] of the assistant tokens of `rows`.
fn nll_sum(model: &Qwen, rows: &[&ChatRow]) -> burn::tensor::Tensor<1> {
    let packed: Vec<(&[u32], &[f32])> = rows
        .iter()
        .map(|r| (r.ids.as_slice(), r.weights.as_slice()))
        .collect();
    summed_nll(model, &packed)
}

/// Mean loss per assistant token over `rows` (no gradients).
///
/// # Errors
/// None today; kept fallible for the policy's errors.
pub fn mean_loss(model: &Qwen, rows: &[ChatRow], max_tokens: usize) -> Result<f64, Error> {
    let refs: Vec<&ChatRow> = rows.iter().collect();
    let mut nll = 0.0;
    let mut tokens = 0;
    for mb in micro_batches(&refs, max_tokens) {
        nll += f64::from(nll_sum(model, &mb).into_scalar::<f32>());
        tokens += mb.iter().map(|r| loss_tokens(r)).sum::<usize>();
    }
    Ok(nll / tokens.max(1) as f64)
}

/// One optimizer step's record (a line of `sft_metrics.jsonl`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ChatSftStep {
    /// 1-based step.
    pub step: usize,
    /// Of `steps`.
    pub steps: usize,
    /// 0-based epoch.
    pub epoch: usize,
    /// Mean loss per assistant token of the global batch.
    pub loss: f64,
    /// Learning rate used.
    pub lr: f64,
    /// Global gradient norm before clipping.
    pub grad_norm: f64,
    /// Examples in the step.
    pub examples: usize,
    /// Micro-batches it took.
    pub micro_batches: usize,
    /// Assistant tokens in the loss.
    pub tokens: usize,
    /// Seconds of the step.
    pub secs: f64,
    /// The validation loss, when measured after this step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub val_loss: Option<f64>,
}

/// What a run did.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatSftReport {
    /// The run directory.
    pub out: PathBuf,
    /// The HF directory written at the end.
    pub model_dir: PathBuf,
    /// Every step of the run (the resumed part included).
    pub steps: Vec<ChatSftStep>,
    /// Bad rows (dropped or truncated).
    pub bad: Vec<BadRow>,
    /// Validation loss before the first step, when there is a validation split.
    pub val_loss_before: Option<f64>,
}

/// Starts a run in `out` (which must not hold one already).
///
/// # Errors
/// Bad config, unreadable model or data, bad rows under [`BadRows::Fail`], IO.
pub fn run(
    config: &ChatSftConfig,
    out: &Path,
    device: &Device,
    stop_after: Option<usize>,
    log: &mut dyn FnMut(&str),
) -> Result<ChatSftReport, Error> {
    config.validate()?;
    if checkpoint::find(out).is_some() {
        return Err(Error::TrainConfig {
            field: "out".into(),
            message: format!(
                "{} holds a run already: resume it with `rstar sft --resume {}`",
                out.display(),
                out.display()
            ),
        });
    }
    std::fs::create_dir_all(out).map_err(|e| io(out, e))?;
    let config_path = out.join("config.json");
    std::fs::write(&config_path, serde_json::to_string_pretty(config)? + "\n")
        .map_err(|e| io(&config_path, e))?;
    let (model, tokenizer) = rstar_policy::load_dir(&config.model, &device.clone().autodiff())?;
    let (model, lora_base) = match &config.lora {
        Some(lora) => {
            let base = std::path::absolute(&config.model).map_err(|e| io(&config.model, e))?;
            let digest = model.base_digest()?;
            let total = model.config.num_params();
            let model = model
                .with_lora(lora, config.seed)?
                .with_base_precision(config.base_precision)?;
            log(&format!(
                "{}: {} of {total} parameters train ({:.2}%); base {}{} (digest {})",
                crate::phases::lora_summary(lora),
                model.trainable_parameters(),
                100.0 * model.trainable_parameters() as f64 / total.max(1) as f64,
                base.display(),
                crate::phases::base_precision_note(config.base_precision),
                &digest[..12]
            ));
            (
                model,
                Some(checkpoint::LoraBase {
                    path: base,
                    digest,
                    precision: config.base_precision,
                }),
            )
        }
        None => (model, None),
    };
    std::fs::write(out.join("sft_metrics.jsonl"), "").map_err(|e| io(out, e))?;
    let policy = Policy {
        model,
        tokenizer,
        lora_base,
    };
    train(config, out, policy, None, stop_after, log)
}

/// Continues the run in `out` from its last checkpoint, with its saved config.
///
/// # Errors
/// No checkpoint, a config that no longer reads, IO.
pub fn resume(
    out: &Path,
    device: &Device,
    stop_after: Option<usize>,
    log: &mut dyn FnMut(&str),
) -> Result<ChatSftReport, Error> {
    let config_path = out.join("config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|e| io(&config_path, e))?;
    let config: ChatSftConfig = serde_json::from_str(&text).map_err(|e| {
        Error::Dataset(LineError::new(config_path.clone(), e.line(), e.to_string()))
    })?;
    config.validate()?;
    let dir = checkpoint::find(out).ok_or_else(|| Error::Resume {
        path: out.to_path_buf(),
        message: "no checkpoint to resume from (checkpoints/last/ is missing)".into(),
    })?;
    // A checkpoint whose files changed since they were written is refused with the file.
    rstar_policy::verify_digests(&dir)?;
    let state = checkpoint::read_state(&dir)?;
    let (model, tokenizer, optimizer) = checkpoint::load(
        out,
        &dir,
        &state,
        &device.clone().autodiff(),
        adamw(config.weight_decay),
    )?;
    checkpoint::truncate_lines(&out.join("sft_metrics.jsonl"), state.lines.sft_metrics)?;
    log(&format!(
        "resuming {} after step {}",
        out.display(),
        state.sft_steps
    ));
    let policy = Policy {
        model,
        tokenizer,
        lora_base: state.lora_base.clone(),
    };
    train(
        &config,
        out,
        policy,
        Some((state.sft_steps, optimizer)),
        stop_after,
        log,
    )
}

fn io(path: &Path, source: std::io::Error) -> Error {
    Error::Io(IoError::new(path.to_path_buf(), source))
}

/// Reads, renders and tokenizes the data for `model` (rows beyond its context are bad rows,
/// ids beyond its vocabulary an error), writes `bad_rows.jsonl` and logs what was read.
fn load_data(
    config: &ChatSftConfig,
    model: &Qwen,
    tokenizer: &Tokenizer,
    out: &Path,
    log: &mut dyn FnMut(&str),
) -> Result<Prepared, Error> {
    let t0 = Instant::now();
    let format = chat_format_of(&config.model, config.chat_format.as_deref())?;
    let context = model.config.max_position_embeddings;
    let mut effective = config.clone();
    if context < config.max_len {
        log(&format!(
            "max_len {} is beyond the model's context; using {context} (max_position_embeddings)",
            config.max_len
        ));
        effective.max_len = context;
    }
    let data = prepare(&effective, tokenizer, format)?;
    let vocab = model.config.vocab_size;
    if let Some((row, id)) = data.train.iter().flatten().chain(&data.val).find_map(|r| {
        r.ids
            .iter()
            .find(|&&t| t as usize >= vocab)
            .map(|&t| (r, t))
    }) {
        return Err(Error::TrainConfig {
            field: "model".into(),
            message: format!(
                "{}: token id {id} is beyond the model's vocabulary ({vocab}): {}'s tokenizer.json does not belong to its weights",
                row.at,
                config.model.display()
            ),
        });
    }
    let bad_path = out.join("bad_rows.jsonl");
    let mut bad_file = std::fs::File::create(&bad_path).map_err(|e| io(&bad_path, e))?;
    for b in &data.bad {
        writeln!(bad_file, "{}", serde_json::to_string(b)?).map_err(|e| io(&bad_path, e))?;
    }
    log(&format!(
        "{} template; {} training and {} validation conversations from {} files in {:.1}s; {} bad rows ({} truncated and kept, the rest dropped; listed in {})",
        format.as_str(),
        data.train.iter().map(Vec::len).sum::<usize>(),
        data.val.len(),
        config.data.len(),
        t0.elapsed().as_secs_f64(),
        data.bad.len(),
        data.bad.iter().filter(|b| b.truncated).count(),
        bad_path.display()
    ));
    for b in data.bad.iter().take(5) {
        log(&format!("  {}: {}", b.at, b.reason));
    }
    Ok(data)
}

/// The schedule of a run: its steps and which examples each one takes.
struct Plan {
    weights: Vec<f64>,
    seed: u64,
    global_batch: usize,
    steps_per_epoch: usize,
    steps: usize,
    warmup: usize,
}

impl Plan {
    fn new(config: &ChatSftConfig, data: &Prepared) -> Plan {
        let weights: Vec<f64> = config.data.iter().map(|d| d.weight).collect();
        let epoch_len = epoch_order(&data.train, &weights, config.seed, 0).len();
        let steps_per_epoch = epoch_len.div_ceil(config.global_batch);
        let steps = steps_per_epoch * config.epochs;
        Plan {
            weights,
            seed: config.seed,
            global_batch: config.global_batch,
            steps_per_epoch,
            steps,
            warmup: (config.warmup_ratio * steps as f64).ceil() as usize,
        }
    }

    /// The examples of 0-based `step`.
    fn batch<'a>(&self, data: &'a Prepared, step: usize) -> Vec<&'a ChatRow> {
        let epoch = step / self.steps_per_epoch;
        epoch_order(&data.train, &self.weights, self.seed, epoch)
            .into_iter()
            .skip((step % self.steps_per_epoch) * self.global_batch)
            .take(self.global_batch)
            .map(|(f, r)| &data.train[f][r])
            .collect()
    }
}

/// The gradients of one global batch, accumulated over its micro-batches, each micro-batch's
/// summed loss divided by the batch's assistant tokens: the gradients, the batch's mean loss,
/// its tokens and the number of micro-batches.
fn batch_grads(
    model: &Qwen,
    batch: &[&ChatRow],
    micro_batch_tokens: usize,
) -> (GradientsParams, f64, usize, usize) {
    let tokens: usize = batch.iter().map(|r| loss_tokens(r)).sum();
    let mbs = micro_batches(batch, micro_batch_tokens);
    let mut accumulator = GradientsAccumulator::<Qwen>::new();
    let mut nll = 0.0;
    for mb in &mbs {
        let loss = nll_sum(model, mb) / tokens.max(1) as f32;
        nll += f64::from(loss.clone().into_scalar::<f32>());
        accumulator.accumulate(model, GradientsParams::from_grads(loss.backward(), model));
    }
    (accumulator.grads(), nll, tokens, mbs.len())
}

fn append_line(path: &Path, record: &impl Serialize) -> Result<(), Error> {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| io(path, e))?;
    writeln!(f, "{}", serde_json::to_string(record)?).map_err(|e| io(path, e))
}

/// The trainer's atomic checkpoint, in its SFT phase: `step` steps and `lines` metric lines.
fn save_checkpoint(
    out: &Path,
    (step, lines): (usize, usize),
    lora_base: Option<&checkpoint::LoraBase>,
    model: &Qwen,
    tokenizer: &Tokenizer,
    optimizer: &burn::optim::ModuleOptimizer,
) -> Result<(), Error> {
    let state = ResumeState {
        version: STATE_VERSION,
        phase: Phase::Sft,
        sft_steps: step,
        rl_steps: 0,
        curriculum: None,
        stage_pool: None,
        lines: Lines {
            sft_metrics: lines,
            metrics: 0,
            eval: 0,
        },
        param_ids: checkpoint::param_ids(model),
        run_config: None,
        lora_base: lora_base.cloned(),
    };
    checkpoint::save(
        &checkpoint::dir_of(out),
        &state,
        model,
        tokenizer,
        optimizer,
    )
}

/// Writes `<out>/model`: the HF directory (a LoRA run's adapters merged in), with the input
/// model's chat template and generation config; a LoRA run's adapter also goes to
/// `<out>/adapter` in PEFT's layout.
fn write_model(
    config: &ChatSftConfig,
    model: &Qwen,
    tokenizer: &Tokenizer,
    out: &Path,
) -> Result<PathBuf, Error> {
    if model.lora.is_some() {
        let base = std::path::absolute(&config.model).map_err(|e| io(&config.model, e))?;
        rstar_policy::lora::save_adapter(model, &out.join("adapter"), &base.to_string_lossy())?;
    }
    let model_dir = out.join("model");
    save_dir(&model.valid(), tokenizer, &model_dir, WeightDtype::F32)?;
    for name in ["tokenizer_config.json", "generation_config.json"] {
        let from = config.model.join(name);
        if from.is_file() {
            std::fs::copy(&from, model_dir.join(name)).map_err(|e| io(&from, e))?;
        }
    }
    // The digests again, over the copied files too.
    rstar_policy::write_digests(&model_dir)?;
    Ok(model_dir)
}

/// What a run trains: the model, its tokenizer and, with LoRA, the frozen base its adapters
/// sit on.
struct Policy {
    model: Qwen,
    tokenizer: Tokenizer,
    lora_base: Option<checkpoint::LoraBase>,
}

fn train(
    config: &ChatSftConfig,
    out: &Path,
    policy: Policy,
    start: Option<(usize, burn::optim::ModuleOptimizer)>,
    stop_after: Option<usize>,
    log: &mut dyn FnMut(&str),
) -> Result<ChatSftReport, Error> {
    let Policy {
        model,
        tokenizer,
        lora_base,
    } = policy;
    let mut model = model
        .with_precision(config.precision)
        .with_gradient_checkpointing(config.gradient_checkpointing);
    let data = load_data(config, &model, &tokenizer, out, log)?;
    let plan = Plan::new(config, &data);
    let (done, mut optimizer) = start.unwrap_or_else(|| (0, adamw(config.weight_decay)));
    let metrics_path = out.join("sft_metrics.jsonl");
    let mut report = ChatSftReport {
        out: out.to_path_buf(),
        model_dir: out.join("model"),
        steps: rstar_episode::episode::read_jsonl(&metrics_path)?,
        bad: data.bad.clone(),
        val_loss_before: None,
    };
    let val_loss = |model: &Qwen| mean_loss(&model.valid(), &data.val, config.micro_batch_tokens);
    if !data.val.is_empty() && done == 0 {
        let v = val_loss(&model)?;
        log(&format!("validation loss before training: {v:.4}"));
        report.val_loss_before = Some(v);
    }
    log(&format!(
        "{} steps ({} epochs of {}), global batch {}, warm-up {}",
        plan.steps, config.epochs, plan.steps_per_epoch, config.global_batch, plan.warmup
    ));
    for step in done..plan.steps {
        let started = Instant::now();
        let batch = plan.batch(&data, step);
        let (mut grads, loss, tokens, micro_batches) =
            batch_grads(&model, &batch, config.micro_batch_tokens);
        let grad_norm = clip_global_norm(&model, &mut grads, config.grad_clip);
        crate::optim::check_step_finite("sft", step as u64 + 1, loss, grad_norm, "lr")?;
        let lr = lr_at(
            step,
            plan.steps,
            plan.warmup,
            config.lr,
            config.schedule,
            config.min_lr_ratio,
        );
        model = optimizer.step(lr, model, grads);
        let n = step + 1;
        let validate =
            n == plan.steps || (config.eval_every > 0 && n.is_multiple_of(config.eval_every));
        let record = ChatSftStep {
            step: n,
            steps: plan.steps,
            epoch: step / plan.steps_per_epoch,
            loss,
            lr,
            grad_norm,
            examples: batch.len(),
            micro_batches,
            tokens,
            secs: started.elapsed().as_secs_f64(),
            val_loss: if validate && !data.val.is_empty() {
                Some(val_loss(&model)?)
            } else {
                None
            },
        };
        append_line(&metrics_path, &record)?;
        report.steps.push(record);
        log(&format!(
            "sft step {n}/{} (epoch {}): loss {loss:.4}{}, lr {lr:.2e}, grad norm {grad_norm:.2}, {} examples in {micro_batches} micro-batches, {:.2}s",
            plan.steps,
            record.epoch + 1,
            record
                .val_loss
                .map_or_else(String::new, |v| format!(", validation loss {v:.4}")),
            batch.len(),
            record.secs
        ));
        if n == plan.steps || n.is_multiple_of(config.checkpoint_every) {
            let lines = (n, report.steps.len());
            save_checkpoint(
                out,
                lines,
                lora_base.as_ref(),
                &model,
                &tokenizer,
                &optimizer,
            )?;
        }
        if stop_after.is_some_and(|k| n >= k) && n < plan.steps {
            return Ok(report);
        }
    }
    report.model_dir = write_model(config, &model, &tokenizer, out)?;
    log(&format!("model written to {}", report.model_dir.display()));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(at: &str, len: usize) -> ChatRow {
        ChatRow {
            at: at.into(),
            ids: vec![1; len],
            weights: vec![1.0; len],
        }
    }

    #[test]
    fn data_specs_read_weights_after_the_last_colon() {
        let s: DataSpec = "a.jsonl:0.75".parse().unwrap();
        assert_eq!((s.path.to_str().unwrap(), s.weight), ("a.jsonl", 0.75));
        let s: DataSpec = "dir:x/b.parquet".parse().unwrap();
        assert_eq!(
            (s.path.to_str().unwrap(), s.weight),
            ("dir:x/b.parquet", 1.0)
        );
        assert!("a.jsonl:-1".parse::<DataSpec>().is_err());
        assert!("a.jsonl:0".parse::<DataSpec>().is_err());
    }

    #[test]
    fn an_epoch_mixes_files_by_weight_and_cycles_small_ones() {
        // 30 + 10 rows, weights 1:3: 40 examples, 10 from the first file and 30 from the
        // second (each of its rows three times).
        let train = vec![
            (0..30)
                .map(|i| row(&format!("a:{i}"), 5))
                .collect::<Vec<_>>(),
            (0..10).map(|i| row(&format!("b:{i}"), 5)).collect(),
        ];
        let order = epoch_order(&train, &[1.0, 3.0], 7, 0);
        assert_eq!(order.len(), 40);
        assert_eq!(order.iter().filter(|(f, _)| *f == 0).count(), 10);
        for r in 0..10 {
            assert_eq!(order.iter().filter(|&&o| o == (1, r)).count(), 3);
        }
        // Seeded: the same order again, another next epoch.
        assert_eq!(order, epoch_order(&train, &[1.0, 3.0], 7, 0));
        assert_ne!(order, epoch_order(&train, &[1.0, 3.0], 7, 1));
    }

    #[test]
    fn micro_batches_group_similar_lengths_under_the_token_budget() {
        let rows = [
            row("a", 10),
            row("b", 100),
            row("c", 12),
            row("d", 90),
            row("e", 11),
        ];
        let refs: Vec<&ChatRow> = rows.iter().collect();
        let mbs = micro_batches(&refs, 200);
        let names: Vec<Vec<&str>> = mbs
            .iter()
            .map(|mb| mb.iter().map(|r| r.at.as_str()).collect())
            .collect();
        // 100 + 90 padded to 2 × 100 = 200; then 12, 11, 10 together.
        assert_eq!(names, vec![vec!["b", "d"], vec!["c", "e", "a"]]);
        // A row longer than the budget still gets its own micro-batch.
        assert_eq!(micro_batches(&refs, 5).len(), 5);
    }

    #[test]
    fn bad_configs_name_the_field() {
        let mut c = ChatSftConfig::rstar2_agent_sft("m".into(), vec!["a.jsonl".parse().unwrap()]);
        assert!(c.validate().is_ok());
        c.val_fraction = 0.7;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("val_fraction")
        );
        c.val_fraction = 0.0;
        c.global_batch = 0;
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("global_batch")
        );
        c.global_batch = 1;
        c.chat_format = Some("llama".into());
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("chat_format")
        );
        c.chat_format = None;
        c.data.clear();
        assert!(c.validate().unwrap_err().to_string().contains("data"));
    }
}
