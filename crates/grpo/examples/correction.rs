//! Rollout correction and GSPO (issue #61): the same batch, sampled by an engine whose log-probs
//! differ from the trainer's, under no correction, truncated IS (TIS), IcePop, a rejection rule
//! and GSPO; each line prints the loss, verl's mismatch metrics and how much was reweighted or
//! dropped.
//!
//! Run with `cargo run -p rstar-grpo --example correction`.

use burn::tensor::{Device, Tensor, TensorData};
use rstar_grpo::{
    GlobalBatch, GrpoConfig, IsThreshold, PolicyLossInputs, PolicyLossMode,
    RolloutCorrectionConfig, RolloutIs, policy_loss,
};

fn tensor(values: &[f32], device: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(values.to_vec(), [2, 4]), device)
}

fn main() -> anyhow::Result<()> {
    let device = Device::flex().autodiff();
    // Two responses of four tokens; the third token of the first is a tool response. The engine
    // (`rollout`) saw the second token of the first response as much less likely than the
    // trainer's recompute (`old`) does.
    let rollout = [-1.2, -2.2, -2.0, -0.9, -1.5, -0.5, -1.0, -0.8];
    let old = [-1.2, -0.7, -2.0, -0.9, -1.5, -0.4, -1.1, -0.8];
    let new = [-0.8, -0.7, -2.0, -1.3, -1.6, -0.2, -1.9, -0.5];
    let adv = [0.87, 0.87, 0.87, 0.87, -0.87, -0.87, -0.87, -0.87];
    let mask = [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0];

    let rejection: RolloutCorrectionConfig =
        serde_json::from_str(r#"{"rollout_rs": "token_k1", "rollout_rs_threshold": "0.5_2.0"}"#)?;
    for (name, config) in [
        ("no correction", GrpoConfig::rstar2_agent()),
        (
            "token TIS 2.0",
            GrpoConfig::rstar2_agent().with_rollout_correction(RolloutCorrectionConfig::is(
                RolloutIs::Token,
                IsThreshold::Truncate(2.0),
            )),
        ),
        (
            "IcePop 0.5_2",
            GrpoConfig::rstar2_agent().with_rollout_correction(RolloutCorrectionConfig::is(
                RolloutIs::Token,
                IsThreshold::Mask {
                    lower: 0.5,
                    upper: 2.0,
                },
            )),
        ),
        (
            "token_k1 RS",
            GrpoConfig::rstar2_agent().with_rollout_correction(rejection),
        ),
        (
            "GSPO + seq TIS",
            GrpoConfig::rstar2_agent()
                .with_policy_loss(PolicyLossMode::Gspo)
                .with_clip_ratios(3e-4, 4e-4)
                .with_rollout_correction(RolloutCorrectionConfig::preset("decoupled_seq_is")?),
        ),
    ] {
        let log_prob = tensor(&new, &device).require_grad();
        let inputs = PolicyLossInputs::new(
            log_prob.clone(),
            tensor(&old, &device),
            tensor(&adv, &device),
            tensor(&mask, &device),
        )
        .with_rollout_log_prob(tensor(&rollout, &device));
        let out = policy_loss(&config, inputs, &GlobalBatch::new())?;
        let grad = log_prob
            .grad(&out.loss.backward())
            .expect("log_prob requires grad");
        let g: Vec<f32> = grad.into_data().iter::<f32>().collect();
        print!(
            "{name:<15} loss {:+.5}  tokens {}  clip_frac {:.3}",
            out.metrics.loss, out.metrics.num_tokens, out.metrics.clip_frac
        );
        if let Some(c) = &out.correction {
            let get = |k: &str| c.get(&format!("rollout_corr/{k}")).copied();
            print!(
                "  kl {:+.4}  k3_kl {:.4}",
                get("kl").unwrap_or(f64::NAN),
                get("k3_kl").unwrap_or(f64::NAN)
            );
            if let Some(w) = get("rollout_is_mean") {
                print!(
                    "  IS mean {w:.3} max {:.3}",
                    get("rollout_is_max").unwrap_or(f64::NAN)
                );
            }
            if let Some(f) = get("rollout_rs_masked_fraction") {
                print!("  rejected {:.0}%", 100.0 * f);
            }
        }
        println!("\n                d loss / d logp = {g:.4?}");
    }
    Ok(())
}
