//! `rstar lora merge`: a PEFT LoRA adapter folded into its base, written as a plain HF
//! directory; and the `--adapter DIR` of `rstar eval` and `rstar serve`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use rstar_agent::policy::{Qwen, WeightDtype};

/// Arguments of `rstar lora`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to do with an adapter.
    #[command(subcommand)]
    pub command: LoraCommand,
}

/// The `rstar lora` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum LoraCommand {
    /// Fold a PEFT adapter (adapter_config.json, adapter_model.safetensors) into its base model
    /// and write a plain HF directory: the base's config, tokenizer and other files copied, the
    /// merged weights `W + s·B·A` in model.safetensors.
    Merge(MergeArgs),
}

/// Arguments of `rstar lora merge`.
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// The base model directory (HF layout: config.json, *.safetensors).
    #[arg(long)]
    pub base: PathBuf,
    /// The PEFT adapter directory.
    #[arg(long)]
    pub adapter: PathBuf,
    /// Where to write the merged model (created; an existing model there is refused).
    #[arg(long)]
    pub out: PathBuf,
    /// The merged weights' dtype: `f32` or `bf16` [default: the base's, f32 unless it is bf16].
    #[arg(long)]
    pub dtype: Option<String>,
}

/// Runs `rstar lora`.
pub fn run(args: Args) -> Result<()> {
    match args.command {
        LoraCommand::Merge(m) => merge(&m),
    }
}

fn merge(args: &MergeArgs) -> Result<()> {
    anyhow::ensure!(
        !args.out.join("config.json").exists(),
        "--out {}: already holds a model (config.json); choose a new directory",
        args.out.display()
    );
    let dtype = match args.dtype.as_deref() {
        Some("f32") => WeightDtype::F32,
        Some("bf16") => WeightDtype::Bf16,
        Some(other) => anyhow::bail!("--dtype {other}: expected `f32` or `bf16`"),
        None => base_dtype(&args.base)?,
    };
    let device = crate::backend::device_of("flex")?;
    let base = rstar_agent::policy::load_model(&args.base, &device)
        .with_context(|| format!("loading the base model {}", args.base.display()))?;
    let merged = with_adapter(base, Some(&args.adapter))?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    // Everything of the base but its weights and digests: config, tokenizer, generation config.
    for entry in
        std::fs::read_dir(&args.base).with_context(|| format!("reading {}", args.base.display()))?
    {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let weights = name.ends_with(".safetensors") || name == "model.safetensors.index.json";
        if weights || name == rstar_agent::policy::DIGEST_FILE || !entry.file_type()?.is_file() {
            continue;
        }
        let to = args.out.join(&*name);
        std::fs::copy(entry.path(), &to)
            .with_context(|| format!("copying {} to {}", entry.path().display(), to.display()))?;
    }
    let weights = args.out.join("model.safetensors");
    rstar_agent::policy::checkpoint::write_safetensors(&weights, &merged.hf_tensors()?, dtype)?;
    rstar_agent::policy::write_digests(&args.out)?;
    eprintln!(
        "merged {} into {}: {}",
        args.adapter.display(),
        args.base.display(),
        args.out.display()
    );
    Ok(())
}

/// The dtype of the first weight of the base's first safetensors file: bf16 stays bf16,
/// anything else is written as f32. Reads the file's header only.
fn base_dtype(dir: &Path) -> Result<WeightDtype> {
    use std::io::Read;
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    files.sort();
    let Some(first) = files.first() else {
        anyhow::bail!("{}: no *.safetensors file in the base", dir.display());
    };
    let mut file = std::fs::File::open(first).with_context(|| first.display().to_string())?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len)
        .with_context(|| format!("{}: reading the header", first.display()))?;
    let len = u64::from_le_bytes(len).min(100 << 20) as usize;
    let mut header = vec![0u8; len];
    file.read_exact(&mut header)
        .with_context(|| format!("{}: reading the header", first.display()))?;
    let header: serde_json::Value = serde_json::from_slice(&header)
        .with_context(|| format!("{}: the header is not JSON", first.display()))?;
    let bf16 = header.as_object().is_some_and(|m| {
        m.iter()
            .filter(|(k, _)| k.as_str() != "__metadata__")
            .any(|(_, v)| v["dtype"] == "BF16")
    });
    Ok(if bf16 {
        WeightDtype::Bf16
    } else {
        WeightDtype::F32
    })
}

/// `model` with the PEFT adapter in `adapter` folded in (`None`: as it is), for inference:
/// the merged weights compute what the adapter does at the base's speed.
///
/// # Errors
/// The adapter's, naming the file and the field or tensor.
pub fn with_adapter(model: Qwen, adapter: Option<&Path>) -> Result<Qwen> {
    let Some(dir) = adapter else {
        return Ok(model);
    };
    let model = rstar_agent::policy::lora::load_adapter(model, dir)
        .with_context(|| format!("loading the adapter {}", dir.display()))?;
    Ok(model.merge_lora()?)
}

/// The LoRA flags of `rstar train` and `rstar sft`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LoraArgs {
    /// Train LoRA adapters of this rank over the frozen model instead of every weight: the
    /// optimizer and the checkpoints hold the adapters alone [default: full fine-tuning].
    #[arg(long, value_name = "RANK")]
    pub lora: Option<usize>,
    /// LoRA's alpha: the adapters' update is scaled by alpha / rank [default: 2 × rank].
    #[arg(long, value_name = "A", requires = "lora")]
    pub lora_alpha: Option<f64>,
    /// The projections that get adapters, comma-separated, any of q_proj k_proj v_proj o_proj
    /// gate_proj up_proj down_proj [default: all seven].
    #[arg(long, value_name = "NAMES", value_delimiter = ',', requires = "lora")]
    pub lora_targets: Vec<String>,
    /// Rank-stabilised LoRA: scale alpha / √rank.
    #[arg(long, requires = "lora")]
    pub rslora: bool,
    /// How the frozen base holds its seven projection weights: `f32`, or `bf16` for half their
    /// bytes (the adapters, their optimizer state, the embeddings, the head and the norms stay
    /// f32). Needs LoRA (--lora, or the config's) [default: f32].
    #[arg(long, value_name = "f32|bf16")]
    pub base_precision: Option<rstar_agent::policy::Precision>,
}

impl LoraArgs {
    /// The adapter config the flags ask for; `None` without `--lora`.
    pub fn config(&self) -> Option<rstar_agent::policy::LoraConfig> {
        let rank = self.lora?;
        let mut config = rstar_agent::policy::LoraConfig::new(
            rank,
            self.lora_alpha.unwrap_or(2.0 * rank as f64),
        )
        .with_rslora(self.rslora);
        if !self.lora_targets.is_empty() {
            config.targets = self.lora_targets.clone();
        }
        Some(config)
    }

    /// Whether any LoRA flag was given.
    pub fn given(&self) -> bool {
        self.lora.is_some() || self.base_precision.is_some()
    }
}
