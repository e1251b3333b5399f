//! Writes a randomly initialised HF Qwen3 model directory around a real `tokenizer.json`, for
//! trying `rstar train --model DIR` (and `rstar eval`, `rstar serve`) with a real tokenizer
//! without downloading weights: `config.json` (Qwen3ForCausalLM), `model.safetensors` and the
//! tokenizer. The model is tiny (2 layers, width 64, tied embeddings), so almost all of its
//! parameters are the embedding; it scores 0% (it writes random tokens).
//!
//! ```sh
//! cargo run --release -p rstar-policy --example random_hf_model -- \
//!     OUT_DIR TOKENIZER_JSON [VOCAB] [MAX_POSITIONS] [SEED]
//! # e.g. with the real Qwen3 tokenizer:
//! cargo run --release -p rstar-policy --example random_hf_model -- \
//!     /tmp/qwen3-random ../shared/fixtures/qwen/tokenizer_qwen3/tokenizer.json
//! ```
//!
//! `--shape qwen3-0.6b` (anywhere among the arguments) writes Qwen3-0.6B's shape instead
//! (28 layers, width 1024, 596M parameters; 2.4 GB of f32 weights), for GPU checks and
//! benchmarks of a real model size with `--backend wgpu`.
//!
//! `VOCAB` (rows of the embedding) defaults to Qwen2.5/Qwen3's padded 151 936, or the
//! tokenizer's size when that is larger; `MAX_POSITIONS` to Qwen3's 40 960; `SEED` to 0. The
//! EOS id is the tokenizer's `<|im_end|>` when it has one.

use std::path::PathBuf;

use anyhow::{Context, bail};
use burn::tensor::Device;
use rstar_policy::{Architecture, Qwen, QwenConfig, Tokenizer, WeightDtype, save_dir};

/// Qwen2.5/Qwen3's embedding rows (the tokenizer's 151 669 tokens, padded).
const QWEN_VOCAB: usize = 151_936;

fn arg<T: std::str::FromStr>(args: &[String], i: usize, name: &str, default: T) -> anyhow::Result<T>
where
    T::Err: std::fmt::Display,
{
    match args.get(i) {
        None => Ok(default),
        Some(s) => s
            .parse()
            .map_err(|e| anyhow::anyhow!("{name} `{s}` is not valid: {e}")),
    }
}

fn main() -> anyhow::Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let shape = match args.iter().position(|a| a == "--shape") {
        Some(i) => {
            let Some(name) = args.get(i + 1).cloned() else {
                bail!("--shape needs a value: `tiny` or `qwen3-0.6b`");
            };
            args.drain(i..i + 2);
            name
        }
        None => "tiny".to_string(),
    };
    let (Some(out), Some(tokenizer_path)) = (args.first(), args.get(1)) else {
        bail!(
            "usage: random_hf_model OUT_DIR TOKENIZER_JSON [VOCAB] [MAX_POSITIONS] [SEED] [--shape tiny|qwen3-0.6b]"
        );
    };
    let (out, tokenizer_path) = (PathBuf::from(out), PathBuf::from(tokenizer_path));
    let tokenizer = Tokenizer::from_hf_file(&tokenizer_path)?;
    let vocab: usize = arg(&args, 2, "VOCAB", QWEN_VOCAB.max(tokenizer.vocab_size()))?;
    if vocab < tokenizer.vocab_size() {
        bail!(
            "VOCAB {vocab} is smaller than the tokenizer's {} tokens",
            tokenizer.vocab_size()
        );
    }
    let max_positions: usize = arg(&args, 3, "MAX_POSITIONS", 40_960)?;
    let seed: u64 = arg(&args, 4, "SEED", 0)?;
    let eos_token_ids: Vec<u32> = tokenizer.token_to_id("<|im_end|>").into_iter().collect();
    let config = match shape.as_str() {
        "tiny" => QwenConfig {
            architecture: Architecture::Qwen3,
            vocab_size: vocab,
            hidden_size: 64,
            intermediate_size: 128,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 16,
            rope_theta: 1_000_000.0,
            rms_norm_eps: 1e-6,
            max_position_embeddings: max_positions,
            tie_word_embeddings: true,
            qkv_bias: false,
            qk_norm: true,
            eos_token_ids,
        },
        "qwen3-0.6b" => QwenConfig {
            vocab_size: vocab,
            max_position_embeddings: max_positions,
            eos_token_ids,
            ..QwenConfig::qwen3_0_6b()
        },
        other => bail!("--shape `{other}`: expected `tiny` or `qwen3-0.6b`"),
    };
    let params = config.num_params();
    let model = Qwen::random(config, seed, &Device::flex())?;
    save_dir(&model, &tokenizer, &out, WeightDtype::F32)
        .with_context(|| format!("writing {}", out.display()))?;
    println!(
        "wrote a random Qwen3 ({params} parameters, vocab {vocab}, {max_positions} positions) with the tokenizer of {} ({} tokens) to {}",
        tokenizer_path.display(),
        tokenizer.vocab_size(),
        out.display()
    );
    Ok(())
}
