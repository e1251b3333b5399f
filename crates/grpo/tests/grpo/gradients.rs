//! The autodiff gradient of the loss against central finite differences (relative 1e-3).
//!
//! The analytic gradient comes from autodiff on `f32` tensors; the finite differences evaluate the
//! same loss function on `f64` tensors at the same (f32-representable) point, with a central step
//! of 1e-4 in log-probability, so rounding cannot swamp small gradients. Test points keep every
//! log-ratio 0.06 away from the kinks of the clipped objective (`1 − ε_low`, `1 + ε_high`, the
//! dual-clip constant) and the `|δ|` of the abs estimator away from zero, so the loss is smooth
//! around them.

use burn::tensor::{DType, Device, Tensor};
use rstar_grpo::{
    GlobalBatch, GrpoConfig, KlConfig, KlEstimator, LossAggMode, PolicyLossInputs,
    entropy_from_logits, policy_loss,
};

use super::common::{SplitMix, device, flat2, flat2_f64, scalar, values};

const B: usize = 3;
const T: usize = 4;
const STEP: f64 = 1e-4;
/// Distance (in log-ratio, and in `|δ|` for abs) kept from every kink.
const MARGIN: f64 = 0.06;
const REL: f64 = 1e-3;

#[derive(Debug, Clone)]
struct Batch {
    log_prob: Vec<f32>,
    old_log_prob: Vec<f32>,
    advantages: Vec<f32>,
    mask: Vec<f32>,
    ref_log_prob: Vec<f32>,
}

fn far_from(x: f64, kinks: &[f64]) -> bool {
    kinks.iter().all(|k| (x - k.ln()).abs() > MARGIN)
}

fn batch(seed: u64, config: &GrpoConfig) -> Batch {
    let mut rng = SplitMix(seed);
    let mut kinks = vec![
        1.0 - f64::from(config.clip_ratio_low),
        1.0 + f64::from(config.clip_ratio_high),
    ];
    if let Some(c) = config.clip_ratio_c {
        kinks.push(f64::from(c));
    }
    // One positive and two negative advantages; the last row reaches past the dual-clip cap.
    let row_adv = [0.9f32, -1.3, -0.6];
    let mut b = Batch {
        log_prob: vec![],
        old_log_prob: vec![],
        advantages: vec![],
        mask: vec![],
        ref_log_prob: vec![],
    };
    for (row, adv) in row_adv.iter().enumerate() {
        for t in 0..T {
            let old = rng.range(-2.5, -0.2);
            let hi = if row == 2 { 1.4 } else { 0.6 };
            let mut lr = rng.range(-0.5, hi);
            while !far_from(lr, &kinks) {
                lr = rng.range(-0.5, hi);
            }
            let mut delta = rng.range(-0.6, 0.6);
            while delta.abs() < MARGIN {
                delta = rng.range(-0.6, 0.6);
            }
            b.old_log_prob.push(old as f32);
            b.log_prob.push((old + lr) as f32);
            b.ref_log_prob.push((old + lr - delta) as f32);
            b.advantages.push(*adv);
            // A tool-response token inside row 0, padding at the end of row 1.
            let masked = (row == 0 && t == 1) || (row == 1 && t == T - 1);
            b.mask.push(if masked { 0.0 } else { 1.0 });
        }
    }
    b
}

fn wide(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| f64::from(v)).collect()
}

fn loss(config: &GrpoConfig, b: &Batch, log_prob: &[f64], device: &Device) -> Tensor<1> {
    let inputs = PolicyLossInputs::new(
        flat2_f64(log_prob, B, T, device),
        flat2_f64(&wide(&b.old_log_prob), B, T, device),
        flat2_f64(&wide(&b.advantages), B, T, device),
        flat2_f64(&wide(&b.mask), B, T, device),
    )
    .with_ref_log_prob(flat2_f64(&wide(&b.ref_log_prob), B, T, device));
    policy_loss(config, inputs, &GlobalBatch::new())
        .unwrap()
        .loss
}

fn check(config: &GrpoConfig, seed: u64) {
    check_against(config, config, seed);
}

/// Compares the autodiff gradient of `config`'s loss with the finite differences of `fd_config`'s.
fn check_against(config: &GrpoConfig, fd_config: &GrpoConfig, seed: u64) {
    let b = batch(seed, config);
    let ad = device();
    let lp = flat2(&b.log_prob, B, T, &ad).require_grad();
    let inputs = PolicyLossInputs::new(
        lp.clone(),
        flat2(&b.old_log_prob, B, T, &ad),
        flat2(&b.advantages, B, T, &ad),
        flat2(&b.mask, B, T, &ad),
    )
    .with_ref_log_prob(flat2(&b.ref_log_prob, B, T, &ad));
    let out = policy_loss(config, inputs, &GlobalBatch::new()).unwrap();
    let grads = out.loss.backward();
    let analytic = values(&lp.grad(&grads).unwrap());

    let plain = Device::flex();
    let mut nonzero = 0;
    for i in 0..B * T {
        let mut up = wide(&b.log_prob);
        let mut down = up.clone();
        up[i] += STEP;
        down[i] -= STEP;
        let fd = (scalar(&loss(fd_config, &b, &up, &plain))
            - scalar(&loss(fd_config, &b, &down, &plain)))
            / (2.0 * STEP);
        let g = f64::from(analytic[i]);
        if b.mask[i] == 0.0 {
            assert_eq!(g, 0.0, "{config:?} token {i}: masked token has a gradient");
            assert_eq!(fd, 0.0, "{config:?} token {i}: masked token moves the loss");
            continue;
        }
        if g != 0.0 {
            nonzero += 1;
        }
        let err = (fd - g).abs();
        assert!(
            err <= REL * g.abs().max(fd.abs()) + 1e-9,
            "{:?} kl={:?} token {i}: autodiff {g}, finite difference {fd} (rel {:e})",
            config.loss_agg_mode,
            config.kl,
            err / g.abs().max(1e-12)
        );
    }
    assert!(nonzero >= 4, "too few tokens carry a gradient: {nonzero}");
}

const MODES: [LossAggMode; 4] = [
    LossAggMode::TokenMean,
    LossAggMode::SeqMeanTokenMean,
    LossAggMode::SeqMeanTokenSum,
    LossAggMode::SeqMeanTokenSumNorm,
];

#[test]
fn clipped_loss_every_mode_with_and_without_dual_clip() {
    for (k, mode) in MODES.into_iter().enumerate() {
        for c in [Some(3.0), None] {
            let config = GrpoConfig::rstar2_agent()
                .with_loss_agg_mode(mode)
                .with_loss_scale_factor(6.0)
                .with_clip_ratio_c(c);
            check(&config, 11 + k as u64);
        }
    }
}

#[test]
fn kl_terms_every_estimator() {
    let estimators = [
        (KlEstimator::K1, false),
        (KlEstimator::Abs, false),
        (KlEstimator::K2, false),
        (KlEstimator::K3, false),
    ];
    for (k, (estimator, straight_through)) in estimators.into_iter().enumerate() {
        let config = GrpoConfig::grpo().with_kl(Some(KlConfig {
            estimator,
            coef: 0.5,
            straight_through,
        }));
        check(&config, 40 + k as u64);
    }
}

#[test]
fn straight_through_kl_has_the_k2_gradient() {
    let kl = |estimator, straight_through| {
        GrpoConfig::grpo().with_kl(Some(KlConfig {
            estimator,
            coef: 0.5,
            straight_through,
        }))
    };
    for estimator in [KlEstimator::K1, KlEstimator::K3] {
        check_against(&kl(estimator, true), &kl(KlEstimator::K2, false), 50);
    }
}

#[test]
fn entropy_bonus_gradient_wrt_logits() {
    let (b, t, v) = (2usize, 3usize, 5usize);
    let mut rng = SplitMix(7);
    // Values representable in f32, so both evaluations see the same point.
    let logits: Vec<f64> = (0..b * t * v)
        .map(|_| f64::from(rng.range(-2.0, 2.0) as f32))
        .collect();
    let mask = [1.0, 1.0, 0.0, 1.0, 0.0, 1.0];
    let zeros = vec![-1.0f32; b * t];
    let config = GrpoConfig::rstar2_agent().with_entropy_coeff(0.7);
    let eval = |l: &[f64], device: &Device, grad: bool| {
        let dtype = if grad { DType::F32 } else { DType::F64 };
        let lt = Tensor::<3>::from_data(
            burn::tensor::TensorData::new(l.to_vec(), [b, t, v]),
            (device, dtype),
        );
        let lt = if grad { lt.require_grad() } else { lt };
        let two = |x: &[f32]| {
            Tensor::<2>::from_data(
                burn::tensor::TensorData::new(wide(x), [b, t]),
                (device, dtype),
            )
        };
        let inputs = PolicyLossInputs::new(two(&zeros), two(&zeros), two(&[0.5; 6]), two(&mask))
            .with_entropy(entropy_from_logits(lt.clone()));
        (
            policy_loss(&config, inputs, &GlobalBatch::new()).unwrap(),
            lt,
        )
    };
    let ad = device();
    let (out, lt) = eval(&logits, &ad, true);
    assert!(out.metrics.entropy.is_some());
    let analytic = values(&lt.grad(&out.loss.backward()).unwrap());
    let plain = Device::flex();
    for i in 0..b * t * v {
        let mut up = logits.clone();
        let mut down = logits.clone();
        up[i] += STEP;
        down[i] -= STEP;
        let fd = (scalar(&eval(&up, &plain, false).0.loss)
            - scalar(&eval(&down, &plain, false).0.loss))
            / (2.0 * STEP);
        let g = f64::from(analytic[i]);
        let err = (fd - g).abs();
        // Logits of masked tokens get no gradient at all.
        assert!(
            err <= REL * g.abs().max(fd.abs()) + 1e-9,
            "logit {i}: autodiff {g}, finite difference {fd}"
        );
    }
}
