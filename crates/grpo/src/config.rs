//! Hyperparameters of the objective, as a serde struct with named presets.

use serde::{Deserialize, Serialize};

use crate::{AdvantageConfig, AdvantageEstimator, GrpoError, RolloutCorrectionConfig};

/// How the per-token loss matrix becomes a scalar (verl's `loss_agg_mode`).
///
/// `M` is the response mask, `L` the per-token loss; the normalisers come from [`crate::GlobalBatch`]
/// and default to the counts of the batch passed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum LossAggMode {
    /// `Σ L·M / num_tokens · dp_size`, with `num_tokens` the number of unmasked tokens in the
    /// global batch (DAPO's token-level loss; the paper's choice).
    #[default]
    #[serde(rename = "token-mean")]
    TokenMean,
    /// `Σ_seq (Σ_t L·M / (Σ_t M + 1e-8)) / num_sequences · dp_size` (the original GRPO).
    #[serde(rename = "seq-mean-token-mean")]
    SeqMeanTokenMean,
    /// `Σ_seq Σ_t L·M / num_sequences · dp_size`.
    #[serde(rename = "seq-mean-token-sum")]
    SeqMeanTokenSum,
    /// `Σ_seq (Σ_t L·M / loss_scale_factor) / num_sequences · dp_size` (Dr. GRPO, with the
    /// maximum response length as the constant).
    #[serde(rename = "seq-mean-token-sum-norm")]
    SeqMeanTokenSumNorm,
    /// `Σ L·M · dp_size`: the plain sum over tokens, no normaliser (verl's `token-sum`).
    #[serde(rename = "token-sum")]
    TokenSum,
}

/// The policy-gradient loss (verl's `actor.policy_loss.loss_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PolicyLossMode {
    /// PPO's per-token clipped ratio, with dual clip (verl's `vanilla`).
    #[default]
    Vanilla,
    /// GSPO (Zheng et al. 2025): one ratio per sequence, the geometric mean of its token ratios
    /// (`exp(mean_t(logp − old))`), clipped with the same `clip_ratio_low/high`; no dual clip. The
    /// paper's clip range is 3e-4 / 4e-4.
    Gspo,
}

impl PolicyLossMode {
    /// Whether this is the default, [`PolicyLossMode::Vanilla`].
    pub fn is_vanilla(&self) -> bool {
        *self == Self::Vanilla
    }
}

impl LossAggMode {
    /// verl's name for the mode.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TokenMean => "token-mean",
            Self::SeqMeanTokenMean => "seq-mean-token-mean",
            Self::SeqMeanTokenSum => "seq-mean-token-sum",
            Self::SeqMeanTokenSumNorm => "seq-mean-token-sum-norm",
            Self::TokenSum => "token-sum",
        }
    }
}

impl std::str::FromStr for LossAggMode {
    type Err = GrpoError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            Self::TokenMean,
            Self::SeqMeanTokenMean,
            Self::SeqMeanTokenSum,
            Self::SeqMeanTokenSumNorm,
            Self::TokenSum,
        ]
        .into_iter()
        .find(|m| m.as_str() == s)
        .ok_or_else(|| GrpoError::Config {
            field: "loss_agg_mode",
            reason: format!("unknown mode `{s}`"),
        })
    }
}

/// Estimators of the KL divergence to the reference policy, per token (verl's `kl_penalty`).
///
/// With `δ = logp − ref_logp`:
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KlEstimator {
    /// k1: `δ` (verl `kl`).
    K1,
    /// `|δ|` (verl `abs`).
    Abs,
    /// k2: `δ² / 2` (verl `mse`).
    K2,
    /// k3, the low-variance estimator: `e^{−δ} + δ − 1`, with `δ` clamped to ±20 and the result to
    /// ±10 as verl does (verl `low_var_kl`).
    K3,
}

/// An optional KL penalty to a frozen reference policy, added to the loss.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KlConfig {
    /// The per-token estimator.
    pub estimator: KlEstimator,
    /// The weight of the aggregated KL in the loss (verl's `kl_loss_coef`).
    pub coef: f32,
    /// Take the value of `estimator` but the gradient of k2 (verl's `+` suffix, e.g. `low_var_kl+`),
    /// which is unbiased for the KL gradient.
    #[serde(default)]
    pub straight_through: bool,
}

/// The complete GRPO objective: advantages, clipping, aggregation, and the optional KL and entropy
/// terms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrpoConfig {
    /// How advantages are computed from outcome rewards.
    pub advantage: AdvantageConfig,
    /// ε_low: the ratio is clipped below at `1 − clip_ratio_low`.
    pub clip_ratio_low: f32,
    /// ε_high: the ratio is clipped above at `1 + clip_ratio_high` (Clip-Higher when larger than
    /// ε_low).
    pub clip_ratio_high: f32,
    /// Dual clip for negative advantages: the per-token loss is capped at `−A · c`. `None` turns it
    /// off; verl's default, which the reference recipe inherits, is `Some(3.0)`. Must exceed 1.
    pub clip_ratio_c: Option<f32>,
    /// How the per-token loss matrix is reduced to a scalar.
    pub loss_agg_mode: LossAggMode,
    /// The constant divisor of [`LossAggMode::SeqMeanTokenSumNorm`]; `None` uses the padded
    /// response length of the batch, as verl does (which is only constant when batches are padded
    /// to the maximum response length).
    pub loss_scale_factor: Option<f32>,
    /// The KL penalty to a reference policy; `None` for none.
    pub kl: Option<KlConfig>,
    /// Weight of the entropy bonus (the loss gets `− entropy_coeff · aggregated entropy`); 0 for
    /// none. Needs per-token entropies (`PolicyLossInputs::with_entropy`).
    pub entropy_coeff: f32,
    /// verl's rollout correction: importance weights and rejection from the rollout engine's
    /// log-probs to the trainer's (`PolicyLossInputs::with_rollout_log_prob`). Off by default,
    /// and left out of the serialised config while off.
    #[serde(skip_serializing_if = "RolloutCorrectionConfig::is_off")]
    pub rollout_correction: RolloutCorrectionConfig,
    /// `vanilla` (PPO's token ratio, the default) or `gspo` (a sequence ratio); left out of the
    /// serialised config when vanilla.
    #[serde(skip_serializing_if = "PolicyLossMode::is_vanilla")]
    pub policy_loss: PolicyLossMode,
}

impl GrpoConfig {
    /// The same as [`GrpoConfig::rstar2_agent`].
    pub fn new() -> Self {
        Self::rstar2_agent()
    }

    /// rStar2-Agent's GRPO-RoC objective: GRPO advantages, Clip-Higher with ε_low 0.2 and ε_high
    /// 0.28, token-mean aggregation, no KL, no entropy term. Dual clip `c = 3` is kept because the
    /// reference trainer runs verl's default.
    pub fn rstar2_agent() -> Self {
        Self {
            advantage: AdvantageConfig::new(),
            clip_ratio_low: 0.2,
            clip_ratio_high: 0.28,
            clip_ratio_c: Some(3.0),
            loss_agg_mode: LossAggMode::TokenMean,
            loss_scale_factor: None,
            kl: None,
            entropy_coeff: 0.0,
            rollout_correction: RolloutCorrectionConfig::off(),
            policy_loss: PolicyLossMode::Vanilla,
        }
    }

    /// DAPO (Yu et al. 2025) as verl's DAPO recipes run it: Clip-Higher 0.2/0.28, dual clip
    /// `c = 10`, token-level loss, GRPO advantages, no KL and no entropy term. Dynamic sampling and
    /// the over-long penalty live outside the loss.
    pub fn dapo() -> Self {
        Self {
            clip_ratio_c: Some(10.0),
            ..Self::rstar2_agent()
        }
    }

    /// Dr. GRPO (Liu et al. 2025): advantages without the std division, the loss summed over
    /// tokens and divided by a constant, symmetric clipping 0.2, no KL and no entropy term.
    /// Set [`GrpoConfig::loss_scale_factor`] to the maximum response length of the run.
    pub fn dr_grpo() -> Self {
        Self {
            advantage: AdvantageConfig::new().with_estimator(AdvantageEstimator::DrGrpo),
            clip_ratio_low: 0.2,
            clip_ratio_high: 0.2,
            clip_ratio_c: Some(3.0),
            loss_agg_mode: LossAggMode::SeqMeanTokenSumNorm,
            loss_scale_factor: None,
            kl: None,
            entropy_coeff: 0.0,
            rollout_correction: RolloutCorrectionConfig::off(),
            policy_loss: PolicyLossMode::Vanilla,
        }
    }

    /// The original GRPO (Shao et al. 2024) as verl's examples run it: symmetric clipping 0.2,
    /// seq-mean-token-mean aggregation, k3 KL with weight 0.001.
    pub fn grpo() -> Self {
        Self {
            advantage: AdvantageConfig::new(),
            clip_ratio_low: 0.2,
            clip_ratio_high: 0.2,
            clip_ratio_c: Some(3.0),
            loss_agg_mode: LossAggMode::SeqMeanTokenMean,
            loss_scale_factor: None,
            kl: Some(KlConfig {
                estimator: KlEstimator::K3,
                coef: 0.001,
                straight_through: false,
            }),
            entropy_coeff: 0.0,
            rollout_correction: RolloutCorrectionConfig::off(),
            policy_loss: PolicyLossMode::Vanilla,
        }
    }

    /// The same config with another aggregation mode.
    pub fn with_loss_agg_mode(mut self, mode: LossAggMode) -> Self {
        self.loss_agg_mode = mode;
        self
    }

    /// The same config with a constant divisor for [`LossAggMode::SeqMeanTokenSumNorm`].
    pub fn with_loss_scale_factor(mut self, factor: f32) -> Self {
        self.loss_scale_factor = Some(factor);
        self
    }

    /// The same config with other clip ratios.
    pub fn with_clip_ratios(mut self, low: f32, high: f32) -> Self {
        self.clip_ratio_low = low;
        self.clip_ratio_high = high;
        self
    }

    /// The same config with another dual-clip constant (`None` turns dual clip off).
    pub fn with_clip_ratio_c(mut self, c: Option<f32>) -> Self {
        self.clip_ratio_c = c;
        self
    }

    /// The same config with a KL penalty.
    pub fn with_kl(mut self, kl: Option<KlConfig>) -> Self {
        self.kl = kl;
        self
    }

    /// The same config with an entropy bonus.
    pub fn with_entropy_coeff(mut self, coeff: f32) -> Self {
        self.entropy_coeff = coeff;
        self
    }

    /// The same config with a rollout correction.
    pub fn with_rollout_correction(mut self, correction: RolloutCorrectionConfig) -> Self {
        self.rollout_correction = correction;
        self
    }

    /// The same config with another policy loss (`vanilla` or `gspo`).
    pub fn with_policy_loss(mut self, mode: PolicyLossMode) -> Self {
        self.policy_loss = mode;
        self
    }

    /// Checks every field's range.
    ///
    /// # Errors
    /// [`GrpoError::Config`] naming the first bad field.
    pub fn validate(&self) -> Result<(), GrpoError> {
        self.advantage.validate()?;
        let bad = |field: &'static str, reason: String| Err(GrpoError::Config { field, reason });
        if !(self.clip_ratio_low.is_finite() && (0.0..1.0).contains(&self.clip_ratio_low)) {
            return bad(
                "clip_ratio_low",
                format!("must be in [0, 1), got {}", self.clip_ratio_low),
            );
        }
        if !(self.clip_ratio_high.is_finite() && self.clip_ratio_high >= 0.0) {
            return bad(
                "clip_ratio_high",
                format!("must be finite and >= 0, got {}", self.clip_ratio_high),
            );
        }
        if let Some(c) = self.clip_ratio_c
            && !(c.is_finite() && c > 1.0)
        {
            return bad("clip_ratio_c", format!("must be finite and > 1, got {c}"));
        }
        if let Some(f) = self.loss_scale_factor
            && !(f.is_finite() && f > 0.0)
        {
            return bad(
                "loss_scale_factor",
                format!("must be finite and > 0, got {f}"),
            );
        }
        if let Some(kl) = self.kl
            && !kl.coef.is_finite()
        {
            return bad("kl.coef", format!("must be finite, got {}", kl.coef));
        }
        if !self.entropy_coeff.is_finite() {
            return bad(
                "entropy_coeff",
                format!("must be finite, got {}", self.entropy_coeff),
            );
        }
        self.rollout_correction.validate()
    }
}

impl Default for GrpoConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// The normalisers of the aggregation when the loss is computed one micro-batch at a time.
///
/// A token-mean over the global batch is `Σ_microbatches Σ L·M / N_global`: pass the number of
/// unmasked tokens of the whole (global, all data-parallel ranks) mini-batch in `num_tokens`, and
/// the gradients of the micro-batches add up to the gradient of the global loss. `dp_size`
/// multiplies the result because data-parallel gradients are averaged, not summed, across ranks.
/// Left at `None`, the counts of the batch passed in are used (verl's fallback), which is only the
/// global mean when that batch is the whole mini-batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GlobalBatch {
    /// Unmasked tokens in the global mini-batch (for [`LossAggMode::TokenMean`]).
    pub num_tokens: Option<f64>,
    /// Sequences with at least one unmasked token in the global mini-batch (for the `seq-mean-*`
    /// modes).
    pub num_sequences: Option<f64>,
    /// Data-parallel world size; 1 on one device.
    pub dp_size: usize,
}

impl GlobalBatch {
    /// Local normalisation: the counts of the batch passed in, one rank.
    pub fn new() -> Self {
        Self {
            num_tokens: None,
            num_sequences: None,
            dp_size: 1,
        }
    }

    /// The same with the global number of unmasked tokens.
    pub fn with_num_tokens(mut self, n: usize) -> Self {
        self.num_tokens = Some(n as f64);
        self
    }

    /// The same with the global number of non-empty sequences.
    pub fn with_num_sequences(mut self, n: usize) -> Self {
        self.num_sequences = Some(n as f64);
        self
    }

    /// The same with a data-parallel world size.
    pub fn with_dp_size(mut self, dp_size: usize) -> Self {
        self.dp_size = dp_size;
        self
    }
}

impl Default for GlobalBatch {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_match_the_paper() {
        let c = GrpoConfig::rstar2_agent();
        assert_eq!((c.clip_ratio_low, c.clip_ratio_high), (0.2, 0.28));
        assert_eq!(c.loss_agg_mode, LossAggMode::TokenMean);
        assert!(c.kl.is_none() && c.entropy_coeff == 0.0);
        assert_eq!(c.advantage.estimator, AdvantageEstimator::Grpo);
        assert_eq!(GrpoConfig::default(), c);
        assert_eq!(GrpoConfig::dapo().clip_ratio_c, Some(10.0));
        let d = GrpoConfig::dr_grpo();
        assert_eq!(d.advantage.estimator, AdvantageEstimator::DrGrpo);
        assert_eq!(d.loss_agg_mode, LossAggMode::SeqMeanTokenSumNorm);
        for p in [c, d, GrpoConfig::dapo(), GrpoConfig::grpo()] {
            p.validate().unwrap();
        }
    }

    #[test]
    fn serde_round_trip_and_names() {
        let c = GrpoConfig::grpo().with_loss_scale_factor(16.0);
        let s = serde_json::to_string(&c).unwrap();
        assert!(
            s.contains("\"seq-mean-token-mean\"") && s.contains("\"k3\""),
            "{s}"
        );
        assert_eq!(serde_json::from_str::<GrpoConfig>(&s).unwrap(), c);
        let partial: GrpoConfig = serde_json::from_str(r#"{"clip_ratio_high": 0.3}"#).unwrap();
        assert_eq!(partial.clip_ratio_high, 0.3);
        assert!(serde_json::from_str::<GrpoConfig>(r#"{"clip_high": 0.3}"#).is_err());
        for m in [
            LossAggMode::TokenMean,
            LossAggMode::SeqMeanTokenMean,
            LossAggMode::SeqMeanTokenSum,
            LossAggMode::SeqMeanTokenSumNorm,
            LossAggMode::TokenSum,
        ] {
            assert_eq!(m.as_str().parse::<LossAggMode>().unwrap(), m);
        }
        assert!("mean".parse::<LossAggMode>().is_err());
        // Off and vanilla are left out, so saved configs read as before.
        let plain = serde_json::to_string(&GrpoConfig::new()).unwrap();
        assert!(
            !plain.contains("rollout_correction") && !plain.contains("policy_loss"),
            "{plain}"
        );
        let gspo: GrpoConfig = serde_json::from_str(
            r#"{"policy_loss": "gspo", "rollout_correction": {"rollout_is": "sequence", "rollout_is_threshold": 2.0}}"#,
        )
        .unwrap();
        assert_eq!(gspo.policy_loss, PolicyLossMode::Gspo);
        assert!(!gspo.rollout_correction.is_off());
        assert_eq!(
            serde_json::from_str::<GrpoConfig>(&serde_json::to_string(&gspo).unwrap()).unwrap(),
            gspo
        );
    }

    #[test]
    fn validate_rejects_bad_fields() {
        let cases = [
            (
                GrpoConfig::new().with_clip_ratios(1.0, 0.2),
                "clip_ratio_low",
            ),
            (
                GrpoConfig::new().with_clip_ratios(0.2, -0.1),
                "clip_ratio_high",
            ),
            (
                GrpoConfig::new().with_clip_ratio_c(Some(1.0)),
                "clip_ratio_c",
            ),
            (
                GrpoConfig::new().with_loss_scale_factor(0.0),
                "loss_scale_factor",
            ),
            (
                GrpoConfig::new().with_entropy_coeff(f32::NAN),
                "entropy_coeff",
            ),
        ];
        for (c, name) in cases {
            match c.validate() {
                Err(GrpoError::Config { field, .. }) => assert_eq!(field, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}
