//! Invariants checked with proptest: zero-sum group advantages, padding invariance, and the plain
//! policy gradient at ratio one.

use proptest::prelude::*;
use rstar_grpo::{
    AdvantageConfig, AdvantageEstimator, GlobalBatch, GrpoConfig, LossAggMode, PolicyLossInputs,
    group_advantages, policy_loss,
};

use super::common::{device, flat2, scalar, values};

const ESTIMATORS: [AdvantageEstimator; 3] = [
    AdvantageEstimator::Grpo,
    AdvantageEstimator::DrGrpo,
    AdvantageEstimator::Rloo,
];

const MODES: [LossAggMode; 4] = [
    LossAggMode::TokenMean,
    LossAggMode::SeqMeanTokenMean,
    LossAggMode::SeqMeanTokenSum,
    LossAggMode::SeqMeanTokenSumNorm,
];

/// A small batch: `[b, t]` log-probs, old log-probs, per-row advantages and a mask with at least
/// one unmasked token.
#[derive(Debug, Clone)]
struct Batch {
    b: usize,
    t: usize,
    log_prob: Vec<f32>,
    old_log_prob: Vec<f32>,
    advantages: Vec<f32>,
    mask: Vec<f32>,
}

fn batch() -> impl Strategy<Value = Batch> {
    (1usize..4, 1usize..6).prop_flat_map(|(b, t)| {
        let n = b * t;
        (
            prop::collection::vec(-3.0f32..-0.05, n),
            prop::collection::vec(-1.0f32..1.0, n),
            prop::collection::vec(-2.0f32..2.0, b),
            prop::collection::vec(prop::bool::weighted(0.7), n),
        )
            .prop_map(move |(old, shift, row_adv, keep)| {
                let mut mask: Vec<f32> = keep.iter().map(|&k| f32::from(u8::from(k))).collect();
                mask[0] = 1.0;
                Batch {
                    b,
                    t,
                    log_prob: old.iter().zip(&shift).map(|(o, s)| o + s).collect(),
                    old_log_prob: old,
                    advantages: (0..n).map(|i| row_adv[i / t]).collect(),
                    mask,
                }
            })
    })
}

/// The same batch with `extra_cols` padding columns and `extra_rows` fully masked rows, whose
/// values are garbage that must not leak into the loss.
fn padded(x: &Batch, extra_cols: usize, extra_rows: usize, garbage: f32) -> Batch {
    let (b, t) = (x.b + extra_rows, x.t + extra_cols);
    let mut out = Batch {
        b,
        t,
        log_prob: vec![],
        old_log_prob: vec![],
        advantages: vec![],
        mask: vec![],
    };
    for row in 0..b {
        for col in 0..t {
            if row < x.b && col < x.t {
                let i = row * x.t + col;
                out.log_prob.push(x.log_prob[i]);
                out.old_log_prob.push(x.old_log_prob[i]);
                out.advantages.push(x.advantages[i]);
                out.mask.push(x.mask[i]);
            } else {
                out.log_prob.push(garbage);
                out.old_log_prob.push(-garbage);
                out.advantages.push(garbage);
                out.mask.push(0.0);
            }
        }
    }
    out
}

/// Loss and its gradient with respect to `log_prob`.
fn loss_and_grad(config: &GrpoConfig, x: &Batch) -> (f64, Vec<f32>) {
    let device = device();
    let lp = flat2(&x.log_prob, x.b, x.t, &device).require_grad();
    let inputs = PolicyLossInputs::new(
        lp.clone(),
        flat2(&x.old_log_prob, x.b, x.t, &device),
        flat2(&x.advantages, x.b, x.t, &device),
        flat2(&x.mask, x.b, x.t, &device),
    );
    let out = policy_loss(config, inputs, &GlobalBatch::new()).unwrap();
    let value = scalar(&out.loss);
    let grad = values(&lp.grad(&out.loss.backward()).unwrap());
    (value, grad)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn group_advantages_sum_to_zero(
        items in prop::collection::vec((0u8..5, prop_oneof![Just(0.0f32), Just(1.0f32), 0.0f32..1.0]), 1..40)
    ) {
        let groups: Vec<u8> = items.iter().map(|x| x.0).collect();
        let scores: Vec<f32> = items.iter().map(|x| x.1).collect();
        for estimator in ESTIMATORS {
            let config = AdvantageConfig::new().with_estimator(estimator);
            let adv = group_advantages(&scores, &groups, &config).unwrap();
            for g in 0..5u8 {
                let members: Vec<usize> = (0..groups.len()).filter(|&i| groups[i] == g).collect();
                let sum: f64 = members.iter().map(|&i| f64::from(adv[i])).sum();
                prop_assert!(sum.abs() <= 1e-5 * members.len() as f64, "{estimator:?} group {g}: sum {sum}");
                let equal = members.iter().all(|&i| scores[i] == scores[members[0]]);
                if members.len() == 1 || equal {
                    prop_assert!(members.iter().all(|&i| adv[i] == 0.0));
                } else if estimator == AdvantageEstimator::Grpo {
                    // Normalised: the unbiased std of the advantages is std / (std + eps) ~ 1.
                    let n = members.len() as f64;
                    let var: f64 = members.iter().map(|&i| f64::from(adv[i]).powi(2)).sum::<f64>() / (n - 1.0);
                    let mean = members.iter().map(|&i| f64::from(scores[i])).sum::<f64>() / n;
                    let std = (members.iter().map(|&i| (f64::from(scores[i]) - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
                    let expected = std / (std + 1e-6);
                    prop_assert!((var.sqrt() - expected).abs() < 1e-4, "std {} vs {expected}", var.sqrt());
                }
            }
        }
    }

    #[test]
    fn padding_never_changes_the_loss(
        x in batch(),
        extra_cols in 0usize..3,
        extra_rows in 0usize..3,
        garbage in prop_oneof![Just(1e4f32), Just(-1e4f32), -50.0f32..50.0],
    ) {
        let y = padded(&x, extra_cols, extra_rows, garbage);
        for mode in MODES {
            for c in [Some(3.0), None] {
                // A constant divisor: the padded length must not be the normaliser.
                let config = GrpoConfig::rstar2_agent()
                    .with_loss_agg_mode(mode)
                    .with_loss_scale_factor(8.0)
                    .with_clip_ratio_c(c);
                let (l0, g0) = loss_and_grad(&config, &x);
                let (l1, g1) = loss_and_grad(&config, &y);
                prop_assert!((l0 - l1).abs() <= 1e-6 * l0.abs().max(1.0), "{mode:?}: {l0} vs {l1}");
                for row in 0..y.b {
                    for col in 0..y.t {
                        let g = g1[row * y.t + col];
                        if row < x.b && col < x.t {
                            let want = g0[row * x.t + col];
                            prop_assert!((g - want).abs() <= 1e-6 * want.abs().max(1e-3), "{mode:?} grad [{row},{col}]: {g} vs {want}");
                        } else {
                            prop_assert_eq!(g, 0.0);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn ratio_one_gives_the_plain_policy_gradient(x in batch(), low in 0.05f32..0.5, high in 0.05f32..0.5) {
        let x = Batch { log_prob: x.old_log_prob.clone(), ..x };
        let n: f64 = x.mask.iter().map(|&m| f64::from(m)).sum();
        let config = GrpoConfig::rstar2_agent().with_clip_ratios(low, high);
        let (loss, grad) = loss_and_grad(&config, &x);
        // −Σ A·M / N and its gradient −A·M / N (the REINFORCE estimator with a baseline).
        let want: f64 = -x.advantages.iter().zip(&x.mask).map(|(&a, &m)| f64::from(a * m)).sum::<f64>() / n;
        prop_assert!((loss - want).abs() <= 1e-5 * want.abs().max(1.0), "{loss} vs {want}");
        for (i, g) in grad.iter().enumerate() {
            let want = -f64::from(x.advantages[i] * x.mask[i]) / n;
            prop_assert!((f64::from(*g) - want).abs() <= 1e-6, "grad {i}: {g} vs {want}");
        }
    }
}
