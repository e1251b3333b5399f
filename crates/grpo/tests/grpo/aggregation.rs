//! Global normalisers across micro-batches, the entropy and KL terms by hand, and bad input.

use burn::tensor::Tensor;
use rstar_grpo::{
    GlobalBatch, GrpoConfig, GrpoError, KlConfig, KlEstimator, LossAggMode, PolicyLossInputs,
    agg_loss, entropy_from_logits, policy_loss,
};

use super::common::{device, flat2, scalar, values};

const B: usize = 4;
const T: usize = 3;

fn data() -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let old: Vec<f32> = (0..B * T).map(|i| -0.3 - 0.1 * i as f32).collect();
    let lp: Vec<f32> = old
        .iter()
        .enumerate()
        .map(|(i, o)| o + 0.05 * (i as f32 % 5.0 - 2.0))
        .collect();
    let adv: Vec<f32> = (0..B * T)
        .map(|i| [1.2f32, -0.4, 0.7, -1.5][i / T])
        .collect();
    // Rows of 3, 1, 2 and 3 tokens; row 1 has its only token last (a tool span before it).
    let mask = vec![1., 1., 1., 0., 0., 1., 1., 1., 0., 1., 1., 1.];
    (lp, old, adv, mask)
}

fn rows(x: &[f32], from: usize, to: usize) -> Vec<f32> {
    x[from * T..to * T].to_vec()
}

#[test]
fn micro_batches_with_global_counts_add_up_to_the_full_batch() {
    let (lp, old, adv, mask) = data();
    let device = device();
    for mode in [
        LossAggMode::TokenMean,
        LossAggMode::SeqMeanTokenMean,
        LossAggMode::SeqMeanTokenSum,
        LossAggMode::SeqMeanTokenSumNorm,
    ] {
        let config = GrpoConfig::rstar2_agent()
            .with_loss_agg_mode(mode)
            .with_loss_scale_factor(5.0);
        let full = |x: &[f32]| flat2(x, B, T, &device);
        let whole = policy_loss(
            &config,
            PolicyLossInputs::new(full(&lp), full(&old), full(&adv), full(&mask)),
            &GlobalBatch::new(),
        )
        .unwrap();
        let global = GlobalBatch::new().with_num_tokens(9).with_num_sequences(4);
        let mut sum = 0.0;
        for (from, to) in [(0, 1), (1, 4)] {
            let part = |x: &[f32]| flat2(&rows(x, from, to), to - from, T, &device);
            let out = policy_loss(
                &config,
                PolicyLossInputs::new(part(&lp), part(&old), part(&adv), part(&mask)),
                &global,
            )
            .unwrap();
            sum += scalar(&out.loss);
        }
        let want = scalar(&whole.loss);
        assert!((sum - want).abs() < 1e-6, "{mode:?}: {sum} vs {want}");

        // Two ranks each holding half the batch: dp_size 2 and the global counts give the loss
        // whose average over ranks is the full-batch loss.
        let global = global.with_dp_size(2);
        let mut avg = 0.0;
        for (from, to) in [(0, 2), (2, 4)] {
            let part = |x: &[f32]| flat2(&rows(x, from, to), to - from, T, &device);
            let out = policy_loss(
                &config,
                PolicyLossInputs::new(part(&lp), part(&old), part(&adv), part(&mask)),
                &global,
            )
            .unwrap();
            avg += scalar(&out.loss) / 2.0;
        }
        assert!((avg - want).abs() < 1e-6, "{mode:?} dp: {avg} vs {want}");
    }
}

#[test]
fn modes_by_hand_on_a_constant_matrix() {
    // L = 1 everywhere: token-mean 1, seq-mean-token-mean 1, seq-mean-token-sum = mean row
    // length over non-empty rows, seq-mean-token-sum-norm = that over the factor.
    let device = device();
    let mask = [1., 1., 1., 0., 0., 0., 1., 0., 0.];
    let ones = flat2(&[1.0; 9], 3, 3, &device);
    let m = flat2(&mask, 3, 3, &device);
    let agg =
        |mode, f| scalar(&agg_loss(ones.clone(), m.clone(), mode, f, &GlobalBatch::new()).unwrap());
    assert!((agg(LossAggMode::TokenMean, None) - 1.0).abs() < 1e-6);
    assert!((agg(LossAggMode::SeqMeanTokenMean, None) - 1.0).abs() < 1e-6);
    assert!((agg(LossAggMode::SeqMeanTokenSum, None) - 2.0).abs() < 1e-6);
    assert!((agg(LossAggMode::SeqMeanTokenSumNorm, Some(4.0)) - 0.5).abs() < 1e-6);
    // Without a factor the padded length (3) is the divisor, as in verl.
    assert!((agg(LossAggMode::SeqMeanTokenSumNorm, None) - 2.0 / 3.0).abs() < 1e-6);
}

#[test]
fn entropy_and_kl_terms_by_hand() {
    let device = device();
    // Uniform logits over 4 symbols: entropy ln 4 for every token.
    let logits = Tensor::<3>::zeros([2, 2, 4], &device);
    let h = values(&entropy_from_logits(logits.clone()));
    for x in h {
        assert!((f64::from(x) - 4f64.ln()).abs() < 1e-6);
    }
    let zeros = flat2(&[-1.0; 4], 2, 2, &device);
    let mask = flat2(&[1., 1., 1., 0.], 2, 2, &device);
    let refs = flat2(&[-1.5, -1.0, -0.5, 9.0], 2, 2, &device);
    let config = GrpoConfig::rstar2_agent()
        .with_entropy_coeff(0.1)
        .with_kl(Some(KlConfig {
            estimator: KlEstimator::K1,
            coef: 2.0,
            straight_through: false,
        }));
    let out = policy_loss(
        &config,
        PolicyLossInputs::new(
            zeros.clone(),
            zeros.clone(),
            flat2(&[0.0; 4], 2, 2, &device),
            mask,
        )
        .with_entropy(entropy_from_logits(logits))
        .with_ref_log_prob(refs),
        &GlobalBatch::new(),
    )
    .unwrap();
    // k1 = logp − ref = (0.5 + 0 − 0.5) / 3 = 0; pg = 0 (zero advantages); entropy ln 4.
    let m = out.metrics;
    assert!(m.kl.unwrap().abs() < 1e-6);
    assert!((f64::from(m.entropy.unwrap()) - 4f64.ln()).abs() < 1e-6);
    assert!((scalar(&out.loss) + 0.1 * 4f64.ln()).abs() < 1e-6);
    assert_eq!(m.num_tokens, 3.0);
    assert!((m.ratio_mean - 1.0).abs() < 1e-7 && m.clip_frac == 0.0);
}

#[test]
fn bad_input_is_an_error() {
    let device = device();
    let a = flat2(&[-1.0; 6], 2, 3, &device);
    let short = flat2(&[-1.0; 4], 2, 2, &device);
    let mask = flat2(&[1.0; 6], 2, 3, &device);
    let config = GrpoConfig::rstar2_agent();
    let run = |config: &GrpoConfig, inputs: PolicyLossInputs, global: &GlobalBatch| {
        policy_loss(config, inputs, global).map(|_| ())
    };

    let e = run(
        &config,
        PolicyLossInputs::new(a.clone(), short.clone(), a.clone(), mask.clone()),
        &GlobalBatch::new(),
    );
    assert!(
        matches!(
            e,
            Err(GrpoError::Shape {
                field: "old_log_prob",
                ..
            })
        ),
        "{e:?}"
    );

    let e = run(
        &config,
        PolicyLossInputs::new(
            a.clone(),
            a.clone(),
            a.clone(),
            flat2(&[0.0; 6], 2, 3, &device),
        ),
        &GlobalBatch::new(),
    );
    assert!(
        matches!(e, Err(GrpoError::EmptyBatch { what: "tokens" })),
        "{e:?}"
    );
    // An empty micro-batch is fine once the global count is known: it contributes zero.
    let ok = policy_loss(
        &config,
        PolicyLossInputs::new(
            a.clone(),
            a.clone(),
            a.clone(),
            flat2(&[0.0; 6], 2, 3, &device),
        ),
        &GlobalBatch::new().with_num_tokens(10),
    )
    .unwrap();
    assert_eq!(scalar(&ok.loss), 0.0);

    let with_kl = config.with_kl(Some(KlConfig {
        estimator: KlEstimator::K3,
        coef: 0.1,
        straight_through: false,
    }));
    let e = run(
        &with_kl,
        PolicyLossInputs::new(a.clone(), a.clone(), a.clone(), mask.clone()),
        &GlobalBatch::new(),
    );
    assert!(
        matches!(e, Err(GrpoError::Config { field: "kl", .. })),
        "{e:?}"
    );

    let e = run(
        &config.with_entropy_coeff(0.01),
        PolicyLossInputs::new(a.clone(), a.clone(), a.clone(), mask.clone()),
        &GlobalBatch::new(),
    );
    assert!(
        matches!(
            e,
            Err(GrpoError::Config {
                field: "entropy_coeff",
                ..
            })
        ),
        "{e:?}"
    );

    let e = run(
        &config,
        PolicyLossInputs::new(a.clone(), a.clone(), a.clone(), mask.clone()),
        &GlobalBatch::new().with_dp_size(0),
    );
    assert!(
        matches!(
            e,
            Err(GrpoError::Config {
                field: "dp_size",
                ..
            })
        ),
        "{e:?}"
    );

    let e = run(
        &config.with_clip_ratios(0.2, -1.0),
        PolicyLossInputs::new(a.clone(), a.clone(), a.clone(), mask.clone()),
        &GlobalBatch::new(),
    );
    assert!(
        matches!(
            e,
            Err(GrpoError::Config {
                field: "clip_ratio_high",
                ..
            })
        ),
        "{e:?}"
    );
    let msg = GrpoError::Shape {
        field: "advantages",
        expected: vec![2, 3],
        got: vec![2, 2],
    }
    .to_string();
    assert_eq!(msg, "`advantages`: expected shape [2, 3], got [2, 2]");
}
