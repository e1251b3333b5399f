//! Generates text from a model directory (HF Qwen2/Qwen3 or our checkpoint),
//! or from a randomly initialised embedded-default model when none is given.
//!
//! ```text
//! cargo run -p rstar-policy --example generate -- [MODEL_DIR] [PROMPT]
//! ```

use anyhow::Result;
use burn::tensor::Device;
use rstar_policy::{
    FinishReason, GenerationConfig, Qwen, QwenConfig, Sampling, Tokenizer, generate, load_dir,
};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let device = Device::flex();
    let (model, tokenizer) = match args.first() {
        Some(dir) => load_dir(std::path::Path::new(dir), &device)?,
        None => {
            let tokenizer = Tokenizer::char();
            let model = Qwen::random(QwenConfig::tiny_char(), 0, &device)?;
            (model, tokenizer)
        }
    };
    println!(
        "model: {:?}, {} layers, width {}, {} parameters",
        model.config.architecture,
        model.config.num_hidden_layers,
        model.config.hidden_size,
        model.config.num_params()
    );
    let prompt = args.get(1).cloned().unwrap_or_else(|| {
        "<|im_start|>user\nWhat is 12*34?<|im_end|>\n<|im_start|>assistant\n".into()
    });
    let ids = tokenizer.encode(&prompt)?;
    let eos = tokenizer.token_to_id("<|im_end|>").into_iter().collect();
    let config = GenerationConfig {
        max_new_tokens: 40,
        stop_strings: vec!["</tool_call>".into(), "</answer>".into()],
        eos,
        sampling: Sampling::TopP {
            p: 0.95,
            temperature: 1.0,
        },
        seed: 42,
    };
    let prompts = vec![ids.clone(), ids[ids.len() / 2..].to_vec()];
    let started = std::time::Instant::now();
    let out = generate(&model, &tokenizer, &prompts, &config)?;
    let elapsed = started.elapsed();
    for (i, g) in out.iter().enumerate() {
        let mean_logp = g.logprobs.iter().sum::<f32>() / g.logprobs.len().max(1) as f32;
        let why = match &g.finish_reason {
            FinishReason::Stop(s) => format!("stop {s:?}"),
            other => format!("{other:?}"),
        };
        println!(
            "[{i}] {} tokens, mean log-prob {mean_logp:.3}, {why}: {:?}",
            g.tokens.len(),
            g.text
        );
    }
    let total: usize = out.iter().map(|g| g.tokens.len()).sum();
    println!("{total} tokens in {:.2?}", elapsed);
    Ok(())
}
