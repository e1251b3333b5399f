//! `rstar sft`: the paper's first step, non-reasoning SFT of a model directory on conversation
//! datasets (see `rstar_agent::chat_sft`).
//!
//! ```text
//! rstar sft --model Qwen3-14B-Base --sft-data tools.jsonl:0.75 chat.parquet:0.25 --out runs/sft
//! rstar train --preset rstar2-agent --model runs/sft/model --data dapo.parquet
//! ```
//!
//! Prints one line a step (loss, validation loss every `--eval-every` steps, learning rate,
//! micro-batches) and the path of the HF directory it writes, `<out>/model`. Bad rows are
//! listed with their file and line; `--bad-rows drop|truncate` trains without them.

use std::path::PathBuf;

use anyhow::{Context, bail};

use rstar_agent::chat_sft::{self, BadRows, ChatSftConfig, DataSpec};

/// Arguments of `rstar sft`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The HF model directory to fine-tune (config.json, model.safetensors, tokenizer.json,
    /// tokenizer_config.json with its chat template).
    #[arg(long, value_name = "DIR", required_unless_present = "resume")]
    pub model: Option<PathBuf>,
    /// Conversation files (JSONL or parquet rows of `messages`, optional `tools`), each
    /// optionally with a mixing weight: `a.jsonl:0.75 b.parquet:0.25`.
    #[arg(long, value_name = "FILE[:W]", num_args = 1.., required_unless_present = "resume")]
    pub sft_data: Vec<DataSpec>,
    /// The preset: `rstar2-agent-sft` (the paper's: 3 epochs, lr 5e-6, 4% warm-up, cosine,
    /// global batch 128).
    #[arg(long, default_value = "rstar2-agent-sft")]
    pub preset: String,
    /// The run directory.
    #[arg(long, default_value = "runs/sft")]
    pub out: PathBuf,
    /// Continue the run in this directory from its last checkpoint, with its saved config.
    #[arg(long, value_name = "RUN_DIR", conflicts_with_all = ["model", "sft_data"])]
    pub resume: Option<PathBuf>,
    /// The chat template: `qwen3` [default: detected from the model's tokenizer_config.json].
    #[arg(long)]
    pub chat_format: Option<String>,
    /// Bad rows (unknown role, legacy `function_call`, tool-call arguments that are not JSON,
    /// longer than --max-len): `fail` (list them and stop), `drop`, or `truncate` (cut the long
    /// ones). All are listed with their file and line and written to `<out>/bad_rows.jsonl`.
    #[arg(long, default_value = "fail")]
    pub bad_rows: BadRows,
    /// Seed of the split, the mixing and the order [default: the preset's, 0].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Passes over the data [default: the preset's, 3].
    #[arg(long)]
    pub epochs: Option<usize>,
    /// Peak learning rate, reached after a warm-up of 4% of the steps, then a cosine to 0
    /// [default: the preset's, 5e-6].
    #[arg(long)]
    pub lr: Option<f64>,
    /// Examples per optimizer step, reached by gradient accumulation [default: the preset's,
    /// 128].
    #[arg(long, value_name = "N")]
    pub global_batch: Option<usize>,
    /// Padded tokens per micro-batch: what fits the device [default: the preset's, 16384].
    #[arg(long, value_name = "N")]
    pub micro_batch_tokens: Option<usize>,
    /// The context in tokens, at most the model's `max_position_embeddings` [default: the
    /// preset's, 8192].
    #[arg(long)]
    pub max_len: Option<usize>,
    /// Share of each file's rows held out for the validation loss [default: the preset's,
    /// 0.01].
    #[arg(long, value_name = "FRAC")]
    pub val_fraction: Option<f64>,
    /// Validation loss every this many steps (and after the last) [default: the preset's, 50].
    #[arg(long)]
    pub eval_every: Option<usize>,
    /// Checkpoint every this many steps (and after the last) [default: the preset's, 50].
    #[arg(long, value_name = "N")]
    pub checkpoint_every: Option<usize>,
    /// Compute precision: `f32`, or `bf16` compute over f32 master weights and optimizer state
    /// [default: f32].
    #[arg(long, value_name = "f32|bf16")]
    pub precision: Option<rstar_agent::policy::Precision>,
    /// Recompute each decoder layer in the backward pass instead of keeping its activations
    /// (config `gradient_checkpointing`) [default: off].
    #[arg(long)]
    pub gradient_checkpointing: bool,
    /// LoRA adapters over the frozen `--model` (config `lora`); the run ends with the adapter
    /// in `OUT/adapter` (PEFT's layout) and the merged model in `OUT/model`.
    #[command(flatten)]
    pub lora: crate::lora::LoraArgs,
    #[arg(long, default_value = "flex", help = crate::backend::HELP)]
    pub backend: String,
    /// Test hook: stop (as if killed) after this many steps of the run.
    #[arg(long, hide = true)]
    pub stop_after_steps: Option<usize>,
}

/// Runs `rstar sft`.
///
/// # Errors
/// A bad config, unreadable model or data, bad rows under `--bad-rows fail`, training errors.
pub fn run(args: Args) -> anyhow::Result<()> {
    let device = crate::backend::device_of(&args.backend)?;
    let mut log = |line: &str| eprintln!("{line}");
    let report = if let Some(dir) = &args.resume {
        if args.lora.given() || args.gradient_checkpointing {
            bail!(
                "--resume continues {} with the config saved there; --lora, --base-precision and --gradient-checkpointing would change it",
                dir.display()
            );
        }
        chat_sft::resume(dir, &device, args.stop_after_steps, &mut log)
            .with_context(|| format!("resuming {}", dir.display()))?
    } else {
        let model = args.model.clone().context("--model is required")?;
        let mut config = match args.preset.as_str() {
            "rstar2-agent-sft" => ChatSftConfig::rstar2_agent_sft(model, args.sft_data.clone()),
            other => bail!("unknown preset {other:?}: expected rstar2-agent-sft"),
        };
        config.chat_format = args.chat_format.clone();
        config.bad_rows = args.bad_rows;
        macro_rules! set {
            ($($field:ident),*) => { $( if let Some(v) = args.$field { config.$field = v; } )* };
        }
        set!(
            seed,
            epochs,
            lr,
            global_batch,
            micro_batch_tokens,
            max_len,
            val_fraction,
            precision,
            eval_every,
            checkpoint_every
        );
        config.lora = args.lora.config();
        config.gradient_checkpointing = args.gradient_checkpointing;
        if let Some(precision) = args.lora.base_precision {
            config.base_precision = precision;
        }
        chat_sft::run(&config, &args.out, &device, args.stop_after_steps, &mut log)
            .with_context(|| format!("rstar sft into {}", args.out.display()))?
    };
    if let (Some(first), Some(last)) = (report.steps.first(), report.steps.last()) {
        eprintln!(
            "loss {:.4} at step {} -> {:.4} at step {}{}",
            first.loss,
            first.step,
            last.loss,
            last.step,
            match (report.val_loss_before, last.val_loss) {
                (Some(a), Some(b)) => format!("; validation loss {a:.4} -> {b:.4}"),
                _ => String::new(),
            }
        );
    }
    if report.model_dir.join("model.safetensors").is_file() {
        println!("{}", report.model_dir.display());
    }
    Ok(())
}
