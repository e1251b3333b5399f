//! One GRPO-RoC loss evaluation and backward pass on Burn's CPU backend (`flex` with autodiff):
//! rStar2-Agent's preset, then the same batch under the other presets.
//!
//! Run with `cargo run -p rstar-grpo --example loss`.

use burn::tensor::{Device, Tensor, TensorData};
use rstar_grpo::{GlobalBatch, GrpoConfig, PolicyLossInputs, policy_loss};

fn tensor(values: &[f32], device: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(values.to_vec(), [2, 4]), device)
}

fn main() -> anyhow::Result<()> {
    let device = Device::flex().autodiff();
    // Two responses of four tokens; the third token of the first is a tool response.
    let old = [-1.2, -0.7, -2.0, -0.9, -1.5, -0.4, -1.1, -0.8];
    let new = [-0.8, -0.7, -2.0, -1.3, -1.6, -0.2, -1.9, -0.5];
    let adv = [0.87, 0.87, 0.87, 0.87, -0.87, -0.87, -0.87, -0.87];
    let mask = [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0];

    for (name, config) in [
        ("rstar2_agent", GrpoConfig::rstar2_agent()),
        ("dr_grpo", GrpoConfig::dr_grpo().with_loss_scale_factor(8.0)),
        ("grpo (no KL)", GrpoConfig::grpo().with_kl(None)),
    ] {
        let log_prob = tensor(&new, &device).require_grad();
        let inputs = PolicyLossInputs::new(
            log_prob.clone(),
            tensor(&old, &device),
            tensor(&adv, &device),
            tensor(&mask, &device),
        );
        // One micro-batch that is the whole batch: local counts are the global ones.
        let out = policy_loss(&config, inputs, &GlobalBatch::new())?;
        let grad = log_prob
            .grad(&out.loss.backward())
            .expect("log_prob requires grad");
        let m = out.metrics;
        println!(
            "{name:<13} loss {:+.5}  clip_frac {:.3} (high {:.3}, low {:.3})  ppo_kl {:+.4}  ratio {:.4}",
            m.loss, m.clip_frac, m.clip_frac_high, m.clip_frac_low, m.ppo_kl, m.ratio_mean
        );
        let g: Vec<f32> = grad.into_data().iter::<f32>().collect();
        println!("              d loss / d logp = {g:.4?}");
    }
    Ok(())
}
