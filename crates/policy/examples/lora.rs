//! LoRA over a frozen base: a random embedded-default model learns one sentence with adapters
//! of rank 8 on every projection, while its base weights stay as they were. `--bf16-base` holds
//! the base's projections in bf16 (`Qwen::with_base_precision`); `--checkpointing` recomputes
//! each layer in the backward pass (`Qwen::with_gradient_checkpointing`).
//!
//! ```text
//! cargo run -p rstar-policy --example lora -- [STEPS] [RANK] [--bf16-base] [--checkpointing]
//! ```

use anyhow::{Result, bail};
use burn::optim::{AdamWConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Device, Int, Tensor, TensorData};
use rstar_policy::lora::LoraConfig;
use rstar_policy::{Precision, Qwen, QwenConfig, Tokenizer, sequence_nll};

fn main() -> Result<()> {
    let all_args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| all_args.iter().any(|a| a == name);
    let (bf16_base, checkpointing) = (flag("--bf16-base"), flag("--checkpointing"));
    let args: Vec<&String> = all_args.iter().filter(|a| !a.starts_with("--")).collect();
    let steps: usize = args.first().map_or(Ok(30), |s| s.parse())?;
    let rank: usize = args.get(1).map_or(Ok(8), |s| s.parse())?;
    let device = Device::flex().autodiff();
    let tokenizer = Tokenizer::char();
    let base = Qwen::random(QwenConfig::tiny_char(), 0, &device)?;
    let all = base.trainable_parameters();
    let mut model = base
        .with_lora(&LoraConfig::new(rank, 2.0 * rank as f64), 1)?
        .with_base_precision(if bf16_base {
            Precision::Bf16
        } else {
            Precision::F32
        })?
        .with_gradient_checkpointing(checkpointing);
    // The frozen base as the model holds it (rounded to bf16 with --bf16-base).
    let start = {
        let mut m = model.clone();
        m.lora = None;
        m.hf_tensors()?
    };
    println!(
        "base projections in {}, gradient checkpointing {}",
        model.base_precision(),
        if checkpointing { "on" } else { "off" }
    );
    println!(
        "{} parameters; with LoRA r = {rank} on all seven projections {} train ({:.1}%)",
        all,
        model.trainable_parameters(),
        100.0 * model.trainable_parameters() as f64 / all as f64
    );

    let ids = tokenizer.encode("<|im_start|>user\n12*34=408<|im_end|>")?;
    let n = ids.len();
    let tokens = Tensor::<2, Int>::from_data(
        TensorData::new(ids.iter().map(|&t| i64::from(t)).collect(), [1, n]),
        &device,
    );
    let mask = Tensor::<2>::ones([1, n - 1], &device);
    let mut optimizer: ModuleOptimizer = AdamWConfig::new().init();
    let mut first = None;
    let mut last = 0.0;
    for step in 0..steps {
        let loss = sequence_nll(&model, tokens.clone(), mask.clone());
        last = loss.clone().into_scalar::<f32>();
        first.get_or_insert(last);
        if step % 10 == 0 {
            println!("step {step:3}: loss {last:.4}");
        }
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optimizer.step(3e-3, model, grads);
    }
    println!("loss {:.4} -> {last:.4}", first.unwrap_or(last));

    // The base did not move: with the adapters taken off, the model is the one we started from.
    let mut frozen = model.clone();
    frozen.lora = None;
    let unchanged = frozen
        .hf_tensors()?
        .iter()
        .zip(start.iter())
        .all(|((_, a), (_, b))| a == b);
    if !unchanged {
        bail!("a base weight moved");
    }
    println!("base weights unchanged: {unchanged}");
    let adapters = model.adapter_tensors()?;
    println!(
        "{} adapter tensors in PEFT's layout, e.g. {} {:?}",
        adapters.len(),
        adapters[0].0.name,
        adapters[0].0.shape
    );
    Ok(())
}
