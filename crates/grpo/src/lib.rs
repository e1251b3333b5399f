//! `rstar-grpo`: the objective rStar2-Agent optimises.
//!
//! Group-relative advantages from outcome rewards, and the PPO-style clipped policy-gradient loss
//! with Clip-Higher, optional dual clip, every verl aggregation mode, an optional KL penalty to a
//! reference policy and an optional entropy bonus. The semantics follow verl
//! (`verl.trainer.ppo.core_algos`), whose own outputs the tests reproduce within 1e-5.
//!
//! It is **not** a rollout, a sampler or a trainer: it takes rewards, masks and log-probabilities
//! that someone else computed and returns advantages and a differentiable scalar.
//!
//! With a rollout correction (verl's TIS, IcePop and rejection sampling, from the rollout
//! engine's log-probs to the trainer's) and GSPO's sequence-level ratio as options.
//!
//! # Main items
//! - [`group_advantages`], [`broadcast_to_tokens`], [`token_advantages`]: GRPO, Dr. GRPO and RLOO
//!   advantages on plain `f32` slices (no Burn, no feature needed), configured by
//!   [`AdvantageConfig`].
//! - [`GrpoConfig`] with presets [`GrpoConfig::rstar2_agent`], [`GrpoConfig::dapo`],
//!   [`GrpoConfig::dr_grpo`], [`GrpoConfig::grpo`]; [`GlobalBatch`] for the normalisers of
//!   micro-batched and data-parallel training (no Burn either).
//! - [`RolloutCorrectionConfig`] (verl's `algorithm.rollout_correction`, decoupled mode) and
//!   [`rollout_correction`]: importance weights, the rejection mask and verl's `rollout_corr/…`
//!   metrics on plain `f32` slices; [`mismatch_metrics`] for the mismatch alone.
//!   [`PolicyLossMode`] picks the vanilla loss or GSPO.
//! - With the `burn` feature (on by default): `policy_loss`, the full loss on Burn tensors from
//!   `PolicyLossInputs`, returning a `PolicyLoss` (the scalar to call `backward` on, plus
//!   `LossMetrics`); the building blocks `token_policy_losses`, `agg_loss`, `kl_penalty` and
//!   `entropy_from_logits` (the entropy bonus takes per-token entropies,
//!   `PolicyLossInputs::with_entropy`, so a caller can compute them without full logits).
//!
//! # Example
//! ```
//! use rstar_grpo::{broadcast_to_tokens, group_advantages, AdvantageConfig};
//!
//! // Two prompts, two responses each; only the first response of prompt "a" is correct.
//! let rewards = [1.0, 0.0, 1.0, 1.0];
//! let prompts = ["a", "a", "b", "b"];
//! let adv = group_advantages(&rewards, &prompts, &AdvantageConfig::new())?;
//! assert!(adv[0] > 0.7 && adv[1] < -0.7);
//! assert_eq!(&adv[2..], &[0.0, 0.0]); // equal rewards: no signal
//!
//! // Three response tokens each; the middle token of response 0 is a tool response.
//! let mask = [1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
//! let per_token = broadcast_to_tokens(&adv, &mask, 3)?;
//! assert_eq!(per_token[1], 0.0);
//! # Ok::<(), rstar_grpo::GrpoError>(())
//! ```
//!
//! # Divergences from verl
//! - A group of one gets zero advantage by default; verl hands its raw reward through
//!   ([`SingletonGroups::Verl`] reproduces that).
//! - Token counts for the aggregation are passed in explicitly through [`GlobalBatch`]; verl's
//!   fallback to the counts of the batch at hand is the default.
//! - Truncated IS refuses a threshold ≤ 1 (verl takes any positive one), and a batch that
//!   rejection empties is an error rather than verl's NaN. verl's bypass mode is not built.
//!
//! # Crate features
//! - `burn` (default): the loss on Burn tensors (`policy_loss` and its building blocks), and the
//!   Burn dependency. Without it (`default-features = false`) the crate is the advantages, the
//!   configs and [`GrpoError`], and builds no Burn at all: a PyTorch trainer's bindings or a
//!   reward service need nothing more.
//!
//! The crate enables no Burn backend: pick one (`flex`, `wgpu`, `cuda`, with `autodiff`) in the
//! binary that uses it. Burn is slow unoptimised: a crate that depends on this one with `burn`
//! wants `[profile.dev.package."*"] opt-level = 2` in its `Cargo.toml` (see `docs/grpo.md`).
#![warn(missing_docs)]

mod advantage;
mod config;
mod correction;
mod error;
#[cfg(feature = "burn")]
mod loss;

pub use advantage::{
    AdvantageConfig, AdvantageEstimator, SingletonGroups, VERL_EPSILON, broadcast_to_tokens,
    group_advantages, token_advantages,
};
pub use config::{GlobalBatch, GrpoConfig, KlConfig, KlEstimator, LossAggMode, PolicyLossMode};
pub use correction::{
    Correction, CorrectionMetrics, IsThreshold, MAX_RS_OPTIONS, METRIC_PREFIX,
    RolloutCorrectionConfig, RolloutIs, RsCriterion, RsLevel, RsOption, RsOptions, RsStat,
    RsThresholds, mismatch_metrics, rollout_correction,
};
pub use error::GrpoError;
#[cfg(feature = "burn")]
pub use loss::{
    LOG_RATIO_CLAMP, LossMetrics, PolicyLoss, PolicyLossInputs, TokenLosses, agg_loss,
    entropy_from_logits, kl_penalty, policy_loss, tensor2, token_policy_losses,
    token_policy_losses_gspo,
};
