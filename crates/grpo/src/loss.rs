//! The clipped policy-gradient loss on Burn tensors, its aggregation modes, the KL estimators and
//! the entropy bonus.

use burn::tensor::activation::log_softmax;
use burn::tensor::{Bool, Tensor, TensorData};

use crate::{
    CorrectionMetrics, GlobalBatch, GrpoConfig, GrpoError, KlEstimator, LossAggMode,
    PolicyLossMode, rollout_correction,
};

/// The log-ratio `logp − old_logp` is clamped to ±20 before `exp`, as verl does, so that one
/// token whose probability collapsed cannot overflow the ratio.
pub const LOG_RATIO_CLAMP: f32 = 20.0;

/// The tensors one loss evaluation needs; all `[batch, response_len]`.
#[derive(Debug, Clone)]
pub struct PolicyLossInputs {
    /// Log-probabilities of the sampled tokens under the current policy; the gradient flows here.
    pub log_prob: Tensor<2>,
    /// Log-probabilities under the policy that sampled them (no gradient).
    pub old_log_prob: Tensor<2>,
    /// Per-token advantages (see [`crate::broadcast_to_tokens`]).
    pub advantages: Tensor<2>,
    /// 1 for tokens in the loss, 0 for padding and tool-response tokens.
    pub response_mask: Tensor<2>,
    /// Log-probabilities under the reference policy; needed when the config has a KL term.
    pub ref_log_prob: Option<Tensor<2>>,
    /// Per-token entropy of the current policy (differentiable, like `log_prob`); needed for the
    /// entropy bonus, and used for the entropy metric whenever given. Taking entropies rather
    /// than `[batch, response_len, vocab]` logits lets the caller compute them in chunks
    /// (`rstar_policy::sequence_loss`), so the bonus costs no vocabulary-sized tensor; from
    /// logits, use [`entropy_from_logits`].
    pub entropy: Option<Tensor<2>>,
    /// Log-probabilities under the engine that sampled the tokens (the behaviour policy, no
    /// gradient); needed when the config has a rollout correction, which weights and rejects
    /// tokens by `old_log_prob − rollout_log_prob`.
    pub rollout_log_prob: Option<Tensor<2>>,
}

impl PolicyLossInputs {
    /// The four required tensors.
    pub fn new(
        log_prob: Tensor<2>,
        old_log_prob: Tensor<2>,
        advantages: Tensor<2>,
        response_mask: Tensor<2>,
    ) -> Self {
        Self {
            log_prob,
            old_log_prob,
            advantages,
            response_mask,
            ref_log_prob: None,
            entropy: None,
            rollout_log_prob: None,
        }
    }

    /// Adds the rollout engine's log-probabilities (for the rollout correction).
    pub fn with_rollout_log_prob(mut self, rollout_log_prob: Tensor<2>) -> Self {
        self.rollout_log_prob = Some(rollout_log_prob);
        self
    }

    /// Adds the reference policy's log-probabilities.
    pub fn with_ref_log_prob(mut self, ref_log_prob: Tensor<2>) -> Self {
        self.ref_log_prob = Some(ref_log_prob);
        self
    }

    /// Adds the current policy's per-token entropy.
    pub fn with_entropy(mut self, entropy: Tensor<2>) -> Self {
        self.entropy = Some(entropy);
        self
    }

    /// Adds the current policy's per-token entropy computed from its `[batch, response_len,
    /// vocab]` logits ([`entropy_from_logits`]); what `with_logits` did before the inputs took
    /// entropies. Prefer [`Self::with_entropy`] with entropies computed in chunks when the
    /// vocabulary is large.
    pub fn with_logits(self, logits: Tensor<3>) -> Self {
        self.with_entropy(entropy_from_logits(logits))
    }
}

/// Statistics of one loss evaluation over the unmasked tokens of the batch passed in.
///
/// Fractions and means are over that batch's tokens (verl's `masked_mean`), not the global batch.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LossMetrics {
    /// The total loss.
    pub loss: f32,
    /// The clipped policy-gradient part.
    pub pg_loss: f32,
    /// Fraction of tokens where clipping is active, either side (verl `actor/pg_clipfrac`).
    pub clip_frac: f32,
    /// Fraction of tokens clipped at `1 + ε_high` (positive advantage, ratio above the band).
    pub clip_frac_high: f32,
    /// Fraction of tokens clipped at `1 − ε_low` (negative advantage, ratio below the band).
    pub clip_frac_low: f32,
    /// Fraction of tokens capped by dual clip (verl `actor/pg_clipfrac_lower`); 0 without it.
    pub dual_clip_frac: f32,
    /// Approximate KL to the sampling policy, the mean of `old_logp − logp` (verl `actor/ppo_kl`).
    pub ppo_kl: f32,
    /// Mean importance ratio.
    pub ratio_mean: f32,
    /// The aggregated KL to the reference policy, before its coefficient; `None` without KL.
    pub kl: Option<f32>,
    /// Mean per-token entropy; `None` without entropies.
    pub entropy: Option<f32>,
    /// Unmasked tokens in the batch passed in.
    pub num_tokens: f32,
}

/// A differentiable loss and its metrics.
#[derive(Debug, Clone)]
pub struct PolicyLoss {
    /// Scalar `[1]` loss to call `backward` on: `pg_loss + kl_coef · kl − entropy_coeff · entropy`.
    pub loss: Tensor<1>,
    /// The clipped policy-gradient part alone.
    pub pg_loss: Tensor<1>,
    /// Metrics, read back from the device.
    pub metrics: LossMetrics,
    /// The rollout correction's metrics, with verl's names (`rollout_corr/…`); `None` when the
    /// correction is off.
    pub correction: Option<CorrectionMetrics>,
}

/// The per-token clipped loss before masking and aggregation, and the intermediate tensors the
/// metrics need.
#[derive(Debug, Clone)]
pub struct TokenLosses {
    /// `max(−A·r, −A·clip(r, 1−ε_low, 1+ε_high))`, then `min(·, −A·c)` where `A < 0` when dual
    /// clip is on.
    pub loss: Tensor<2>,
    /// The importance ratio `exp(clamp(logp − old_logp, ±20))`.
    pub ratio: Tensor<2>,
    /// The clamped `logp − old_logp`.
    pub log_ratio: Tensor<2>,
    /// Where clipping is active (the clipped term is the larger one).
    pub clipped: Tensor<2, Bool>,
    /// Where dual clip caps the loss.
    pub dual_clipped: Tensor<2, Bool>,
}

/// verl's `compute_policy_loss_vanilla` per token.
pub fn token_policy_losses(
    log_prob: Tensor<2>,
    old_log_prob: Tensor<2>,
    advantages: Tensor<2>,
    clip_ratio_low: f32,
    clip_ratio_high: f32,
    clip_ratio_c: Option<f32>,
) -> TokenLosses {
    let log_ratio = (log_prob - old_log_prob).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP);
    let ratio = log_ratio.clone().exp();
    let neg_adv = advantages.clone().neg();
    let l1 = neg_adv.clone() * ratio.clone();
    let l2 = neg_adv
        * ratio
            .clone()
            .clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high);
    let clipped = l2.clone().greater(l1.clone());
    let clip1 = l1.max_pair(l2);
    let (loss, dual_clipped) = match clip_ratio_c {
        Some(c) => {
            let l3 = advantages.clone().mul_scalar(-c);
            let negative = advantages.lower_elem(0.0);
            let dual_clipped = clip1.clone().greater(l3.clone()).bool_and(negative.clone());
            let clip2 = clip1.clone().min_pair(l3);
            (clip1.mask_where(negative, clip2), dual_clipped)
        }
        None => {
            let none = advantages.lower_elem(f32::NEG_INFINITY);
            (clip1, none)
        }
    };
    TokenLosses {
        loss,
        ratio,
        log_ratio,
        clipped,
        dual_clipped,
    }
}

/// verl's `compute_policy_loss_gspo` per token: every token of a sequence carries the sequence's
/// ratio `s = exp(min(mean_t(logp − old), 10))` over the tokens where `response_mask != 0`, with
/// the gradient of each token going through its own `logp` only
/// (`logp − sg(logp) + sg(mean)`); clipped to `[1 − ε_low, 1 + ε_high]`, no dual clip. The
/// returned `log_ratio` is the unclamped `logp − old` (for `ppo_kl`).
pub fn token_policy_losses_gspo(
    log_prob: Tensor<2>,
    old_log_prob: Tensor<2>,
    advantages: Tensor<2>,
    response_mask: Tensor<2>,
    clip_ratio_low: f32,
    clip_ratio_high: f32,
) -> TokenLosses {
    let [b, t] = log_prob.dims();
    let drop = drop_mask(&response_mask);
    let log_ratio = log_prob.clone() - old_log_prob;
    let len = indicator(&response_mask, drop.clone().bool_not())
        .sum_dim(1)
        .clamp_min(1.0);
    let seq = log_ratio.clone().mask_fill(drop, 0.0).sum_dim(1) / len; // [b, 1]
    let log_seq =
        (log_prob.clone() - log_prob.detach() + seq.detach().expand([b, t])).clamp_max(10.0);
    let ratio = log_seq.exp();
    let neg_adv = advantages.clone().neg();
    let l1 = neg_adv.clone() * ratio.clone();
    let l2 = neg_adv
        * ratio
            .clone()
            .clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high);
    let clipped = l2.clone().greater(l1.clone());
    let loss = l1.max_pair(l2);
    let dual_clipped = advantages.lower_elem(f32::NEG_INFINITY);
    TokenLosses {
        loss,
        ratio,
        log_ratio,
        clipped,
        dual_clipped,
    }
}

/// Per-token KL estimate between the current and the reference policy (verl's `kl_penalty`).
///
/// With `straight_through`, the value is the estimator's and the gradient is that of k2
/// (`v2 − sg(v2) + sg(v)`), verl's `+` variants.
pub fn kl_penalty(
    log_prob: Tensor<2>,
    ref_log_prob: Tensor<2>,
    estimator: KlEstimator,
    straight_through: bool,
) -> Tensor<2> {
    let value = kl_forward(log_prob.clone(), ref_log_prob.clone(), estimator);
    if straight_through {
        let k2 = kl_forward(log_prob, ref_log_prob, KlEstimator::K2);
        k2.clone() - k2.detach() + value.detach()
    } else {
        value
    }
}

fn kl_forward(log_prob: Tensor<2>, ref_log_prob: Tensor<2>, estimator: KlEstimator) -> Tensor<2> {
    match estimator {
        KlEstimator::K1 => log_prob - ref_log_prob,
        KlEstimator::Abs => (log_prob - ref_log_prob).abs(),
        KlEstimator::K2 => (log_prob - ref_log_prob).square().mul_scalar(0.5),
        KlEstimator::K3 => {
            let kl = (ref_log_prob - log_prob).clamp(-20.0, 20.0);
            (kl.clone().exp() - kl).sub_scalar(1.0).clamp(-10.0, 10.0)
        }
    }
}

/// Per-token entropy of the categorical distributions given by `logits` `[batch, len, vocab]`.
pub fn entropy_from_logits(logits: Tensor<3>) -> Tensor<2> {
    let [b, t, _] = logits.dims();
    let logp = log_softmax(logits, 2);
    (logp.clone().exp() * logp).sum_dim(2).neg().reshape([b, t])
}

/// Counts of the response mask, read once from the device.
#[derive(Debug, Clone, Copy)]
struct MaskCounts {
    tokens: f64,
    sequences: f64,
    len: usize,
}

fn mask_counts(mask: &Tensor<2>) -> MaskCounts {
    let [_, t] = mask.dims();
    let data = mask.to_data();
    // The slice view avoids a boxed per-element iterator for the usual f32 mask.
    let converted: Vec<f32>;
    let values: &[f32] = match data.as_slice::<f32>() {
        Ok(v) => v,
        Err(_) => {
            converted = data.iter::<f32>().collect();
            &converted
        }
    };
    let mut tokens = 0.0;
    let mut sequences = 0.0;
    for row in values.chunks(t.max(1)) {
        let n = row.iter().filter(|&&m| m != 0.0).count();
        tokens += n as f64;
        if n > 0 {
            sequences += 1.0;
        }
    }
    MaskCounts {
        tokens,
        sequences,
        len: t,
    }
}

/// verl's `agg_loss`: reduces a per-token matrix to a scalar `[1]` over the tokens where
/// `response_mask != 0`. Masked entries never reach the result, even when NaN or infinite.
///
/// # Errors
/// [`GrpoError::Shape`] if the shapes differ, [`GrpoError::EmptyBatch`] when a local default
/// count is zero, [`GrpoError::Config`] for a non-positive `loss_scale_factor` or `dp_size`.
pub fn agg_loss(
    loss_mat: Tensor<2>,
    response_mask: Tensor<2>,
    mode: LossAggMode,
    loss_scale_factor: Option<f32>,
    global: &GlobalBatch,
) -> Result<Tensor<1>, GrpoError> {
    check_shape("loss_mat", &loss_mat, response_mask.dims())?;
    let counts = mask_counts(&response_mask);
    agg_with_counts(
        loss_mat,
        &drop_mask(&response_mask),
        counts,
        mode,
        loss_scale_factor,
        global,
    )
}

fn drop_mask(response_mask: &Tensor<2>) -> Tensor<2, Bool> {
    response_mask.clone().equal_elem(0.0)
}

fn agg_with_counts(
    loss_mat: Tensor<2>,
    drop: &Tensor<2, Bool>,
    counts: MaskCounts,
    mode: LossAggMode,
    loss_scale_factor: Option<f32>,
    global: &GlobalBatch,
) -> Result<Tensor<1>, GrpoError> {
    if global.dp_size == 0 {
        return Err(GrpoError::Config {
            field: "dp_size",
            reason: "must be at least 1".into(),
        });
    }
    let dp = global.dp_size as f64;
    let seq_all = loss_mat.clone().detach();
    let masked = loss_mat.mask_fill(drop.clone(), 0.0);
    let denominator = |given: Option<f64>, local: f64, what: &'static str| {
        let n = given.unwrap_or(local);
        if n > 0.0 && n.is_finite() {
            Ok(n)
        } else if given.is_some() {
            Err(GrpoError::Config {
                field: if what == "tokens" {
                    "num_tokens"
                } else {
                    "num_sequences"
                },
                reason: format!("must be finite and > 0, got {n}"),
            })
        } else {
            Err(GrpoError::EmptyBatch { what })
        }
    };
    Ok(match mode {
        LossAggMode::TokenSum => masked.sum().mul_scalar(dp),
        LossAggMode::TokenMean => {
            let n = denominator(global.num_tokens, counts.tokens, "tokens")?;
            masked.sum().mul_scalar(dp / n)
        }
        LossAggMode::SeqMeanTokenSum
        | LossAggMode::SeqMeanTokenMean
        | LossAggMode::SeqMeanTokenSumNorm => {
            let n = denominator(global.num_sequences, counts.sequences, "sequences")?;
            let seq = masked.sum_dim(1); // [batch, 1]
            let seq = match mode {
                LossAggMode::SeqMeanTokenMean => {
                    let len = indicator(&seq_all, drop.clone().bool_not()).sum_dim(1);
                    seq / len.add_scalar(1e-8)
                }
                LossAggMode::SeqMeanTokenSumNorm => {
                    let f = f64::from(loss_scale_factor.unwrap_or(counts.len as f32));
                    if !(f > 0.0 && f.is_finite()) {
                        return Err(GrpoError::Config {
                            field: "loss_scale_factor",
                            reason: format!("must be finite and > 0, got {f}"),
                        });
                    }
                    seq.div_scalar(f)
                }
                _ => seq,
            };
            seq.sum().mul_scalar(dp / n)
        }
    })
}

fn check_shape<const D: usize>(
    field: &'static str,
    t: &Tensor<D>,
    expected: [usize; 2],
) -> Result<(), GrpoError> {
    let got = t.dims().to_vec();
    if got[..2.min(D)] != expected[..2.min(D)] || D < 2 {
        return Err(GrpoError::Shape {
            field,
            expected: expected.to_vec(),
            got,
        });
    }
    Ok(())
}

/// A 0/1 float tensor of the dtype of `like` (bool `float()` would give the default dtype).
fn indicator(like: &Tensor<2>, b: Tensor<2, Bool>) -> Tensor<2> {
    like.zeros_like().mask_fill(b, 1.0)
}

fn masked_mean(x: Tensor<2>, drop: &Tensor<2, Bool>, n: f64) -> Tensor<1> {
    x.mask_fill(drop.clone(), 0.0).sum().div_scalar(n.max(1.0))
}

/// The full GRPO loss: clipped policy gradient, optional KL and entropy terms, aggregated as the
/// config says, with metrics.
///
/// # Example
/// ```
/// use burn::tensor::{Device, Tensor};
/// use rstar_grpo::{GlobalBatch, GrpoConfig, PolicyLossInputs, policy_loss};
///
/// let device = Device::flex().autodiff();
/// let log_prob = Tensor::<2>::from_floats([[-1.0, -0.5], [-2.0, -0.1]], &device).require_grad();
/// let old = Tensor::<2>::from_floats([[-1.0, -0.5], [-2.0, -0.1]], &device);
/// let adv = Tensor::<2>::from_floats([[1.0, 1.0], [-1.0, -1.0]], &device);
/// let mask = Tensor::<2>::from_floats([[1.0, 1.0], [1.0, 0.0]], &device);
/// let inputs = PolicyLossInputs::new(log_prob.clone(), old, adv, mask);
/// let out = policy_loss(&GrpoConfig::rstar2_agent(), inputs, &GlobalBatch::new())?;
/// // Ratio one: the loss is −Σ A·M / N = −(1 + 1 − 1) / 3.
/// assert!((out.metrics.loss + 1.0 / 3.0).abs() < 1e-6);
/// let grad = log_prob.grad(&out.loss.backward()).unwrap();
/// assert_eq!(grad.dims(), [2, 2]);
/// # Ok::<(), rstar_grpo::GrpoError>(())
/// ```
///
/// # Errors
/// [`GrpoError::Config`] for an invalid config, a KL term without `ref_log_prob` or an entropy
/// bonus without `entropy`; [`GrpoError::Shape`] for mismatched tensors;
/// [`GrpoError::EmptyBatch`] when nothing is unmasked and no global count is given.
pub fn policy_loss(
    config: &GrpoConfig,
    inputs: PolicyLossInputs,
    global: &GlobalBatch,
) -> Result<PolicyLoss, GrpoError> {
    config.validate()?;
    let dims = inputs.log_prob.dims();
    check_shape("old_log_prob", &inputs.old_log_prob, dims)?;
    check_shape("advantages", &inputs.advantages, dims)?;
    check_shape("response_mask", &inputs.response_mask, dims)?;
    if let Some(r) = &inputs.ref_log_prob {
        check_shape("ref_log_prob", r, dims)?;
    }
    if let Some(e) = &inputs.entropy {
        check_shape("entropy", e, dims)?;
    }
    if config.kl.is_some() && inputs.ref_log_prob.is_none() {
        return Err(GrpoError::Config {
            field: "kl",
            reason: "a KL term needs `ref_log_prob`".into(),
        });
    }
    if config.entropy_coeff != 0.0 && inputs.entropy.is_none() {
        return Err(GrpoError::Config {
            field: "entropy_coeff",
            reason: "an entropy bonus needs `entropy`".into(),
        });
    }
    if let Some(r) = &inputs.rollout_log_prob {
        check_shape("rollout_log_prob", r, dims)?;
    }

    // The rollout correction, on the host: its weights (detached) scale the token losses, and
    // its rejection mask replaces the response mask for the loss and the metrics, as in verl.
    let mut mask = inputs.response_mask;
    let mut weights = None;
    let mut correction = None;
    if !config.rollout_correction.is_off() {
        let Some(rollout) = &inputs.rollout_log_prob else {
            return Err(GrpoError::Config {
                field: "rollout_correction",
                reason: "a rollout correction needs `rollout_log_prob` (the engine's log-probs)"
                    .into(),
            });
        };
        let host = |t: &Tensor<2>| -> Vec<f32> { t.to_data().iter::<f32>().collect() };
        let [rows, cols] = dims;
        let c = rollout_correction(
            &config.rollout_correction,
            &host(&inputs.old_log_prob),
            &host(rollout),
            &host(&mask),
            rows,
            cols,
        )?;
        let device = mask.device();
        let like = |values: Vec<f32>| {
            Tensor::<2>::from_data(TensorData::new(values, [rows, cols]), &device)
                .cast(mask.dtype())
        };
        weights = c.weights.map(like);
        let modified = like(c.response_mask);
        mask = modified;
        correction = Some(c.metrics);
    }

    let drop = drop_mask(&mask);
    let counts = mask_counts(&mask);
    let agg = |m: Tensor<2>| {
        agg_with_counts(
            m,
            &drop,
            counts,
            config.loss_agg_mode,
            config.loss_scale_factor,
            global,
        )
    };

    let tok = match config.policy_loss {
        PolicyLossMode::Vanilla => token_policy_losses(
            inputs.log_prob.clone(),
            inputs.old_log_prob,
            inputs.advantages.clone(),
            config.clip_ratio_low,
            config.clip_ratio_high,
            config.clip_ratio_c,
        ),
        PolicyLossMode::Gspo => token_policy_losses_gspo(
            inputs.log_prob.clone(),
            inputs.old_log_prob,
            inputs.advantages.clone(),
            mask.clone(),
            config.clip_ratio_low,
            config.clip_ratio_high,
        ),
    };
    let token_loss = match weights {
        Some(w) => tok.loss * w,
        None => tok.loss,
    };
    let pg_loss = agg(token_loss)?;
    let mut loss = pg_loss.clone();

    let n = counts.tokens;
    let adv = inputs.advantages.detach();
    let ratio = tok.ratio.detach();
    let mut stats = vec![
        masked_mean(indicator(&ratio, tok.clipped), &drop, n),
        masked_mean(
            indicator(
                &ratio,
                ratio
                    .clone()
                    .greater_elem(1.0 + config.clip_ratio_high)
                    .bool_and(adv.clone().greater_elem(0.0)),
            ),
            &drop,
            n,
        ),
        masked_mean(
            indicator(
                &ratio,
                ratio
                    .clone()
                    .lower_elem(1.0 - config.clip_ratio_low)
                    .bool_and(adv.lower_elem(0.0)),
            ),
            &drop,
            n,
        ),
        masked_mean(indicator(&ratio, tok.dual_clipped), &drop, n),
        masked_mean(tok.log_ratio.detach().neg(), &drop, n),
        masked_mean(ratio, &drop, n),
        pg_loss.clone().detach(),
    ];

    let mut kl_slot = None;
    if let (Some(kl), Some(ref_lp)) = (config.kl, inputs.ref_log_prob) {
        let kld = kl_penalty(inputs.log_prob, ref_lp, kl.estimator, kl.straight_through);
        let kl_loss = agg(kld)?;
        kl_slot = Some(stats.len());
        stats.push(kl_loss.clone().detach());
        loss = loss + kl_loss.mul_scalar(kl.coef);
    }
    let mut entropy_slot = None;
    if let Some(entropy) = inputs.entropy {
        entropy_slot = Some(stats.len());
        stats.push(masked_mean(entropy.clone().detach(), &drop, n));
        if config.entropy_coeff != 0.0 {
            loss = loss - agg(entropy)?.mul_scalar(config.entropy_coeff);
        }
    }
    stats.push(loss.clone().detach());

    let values: Vec<f32> = Tensor::cat(stats, 0).into_data().iter::<f32>().collect();
    let metrics = LossMetrics {
        clip_frac: values[0],
        clip_frac_high: values[1],
        clip_frac_low: values[2],
        dual_clip_frac: values[3],
        ppo_kl: values[4],
        ratio_mean: values[5],
        pg_loss: values[6],
        kl: kl_slot.map(|i| values[i]),
        entropy: entropy_slot.map(|i| values[i]),
        loss: values[values.len() - 1],
        num_tokens: n as f32,
    };
    Ok(PolicyLoss {
        loss,
        pg_loss,
        metrics,
        correction,
    })
}

/// Builds a `[rows, cols]` float tensor from a row-major slice.
///
/// # Errors
/// [`GrpoError::Length`] if `values.len() != rows * cols`.
pub fn tensor2(
    field: &'static str,
    values: &[f32],
    rows: usize,
    cols: usize,
    device: &burn::tensor::Device,
) -> Result<Tensor<2>, GrpoError> {
    if values.len() != rows * cols {
        return Err(GrpoError::Length {
            field,
            expected: rows * cols,
            got: values.len(),
        });
    }
    Ok(Tensor::from_data(
        TensorData::new(values.to_vec(), [rows, cols]),
        device,
    ))
}
