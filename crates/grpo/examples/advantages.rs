//! Group-relative advantages of two prompts' rollouts under GRPO, Dr. GRPO and RLOO, broadcast to
//! tokens with a mask that leaves tool-response tokens out.
//!
//! Run with `cargo run -p rstar-grpo --example advantages`.

use rstar_grpo::{AdvantageConfig, AdvantageEstimator, broadcast_to_tokens, group_advantages};

fn main() -> anyhow::Result<()> {
    // Two prompts with four rollouts each (0/1 outcome rewards) and one prompt answered once.
    let rewards = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0];
    let prompts = ["p0", "p0", "p0", "p0", "p1", "p1", "p1", "p1", "p2"];

    println!("reward  prompt      GRPO   Dr.GRPO      RLOO");
    let per_estimator: Vec<Vec<f32>> = [
        AdvantageEstimator::Grpo,
        AdvantageEstimator::DrGrpo,
        AdvantageEstimator::Rloo,
    ]
    .into_iter()
    .map(|e| {
        group_advantages(
            &rewards,
            &prompts,
            &AdvantageConfig::new().with_estimator(e),
        )
    })
    .collect::<Result<_, _>>()?;
    for i in 0..rewards.len() {
        println!(
            "{:>6}  {:>6}  {:>8.4}  {:>8.4}  {:>8.4}",
            rewards[i], prompts[i], per_estimator[0][i], per_estimator[1][i], per_estimator[2][i]
        );
    }

    // Response tokens of the first rollout: 2 generated, 3 tool-response (masked), 2 generated.
    let mask = [1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0];
    let tokens = broadcast_to_tokens(&per_estimator[0][..1], &mask, mask.len())?;
    println!("\nGRPO advantage per token of rollout 0 (tool tokens get 0): {tokens:?}");
    Ok(())
}
