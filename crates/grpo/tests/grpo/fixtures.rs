//! Reproduces verl 0.9.1's own outputs (tests/data/cases.json) within 1e-5.

use rstar_grpo::{
    AdvantageConfig, AdvantageEstimator, GlobalBatch, GrpoConfig, KlEstimator, LossAggMode,
    PolicyLossInputs, SingletonGroups, kl_penalty, policy_loss, token_advantages,
};
use serde_json::Value;

use super::common::{device, json_matrix, scalar, t2, values};

const TOL: f64 = 1e-5;

fn cases() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/cases.json");
    let text = std::fs::read_to_string(path).expect("tests/data/cases.json");
    serde_json::from_str(&text).expect("cases.json is JSON")
}

fn matrix(v: &Value, field: &str) -> Vec<Vec<f64>> {
    assert!(v[field].is_array(), "field `{field}`");
    json_matrix(&v[field])
}

fn vector(v: &Value, field: &str) -> Vec<f64> {
    v[field]
        .as_array()
        .unwrap_or_else(|| panic!("field `{field}`"))
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn close(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= TOL,
        "{what}: got {got}, verl {want} (diff {:e})",
        (got - want).abs()
    );
}

fn close_all(what: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        close(&format!("{what}[{i}]"), f64::from(g), w);
    }
}

fn advantage_config(case: &Value) -> AdvantageConfig {
    let estimator = match (
        case["estimator"].as_str().unwrap(),
        case["norm_by_std"].as_bool(),
    ) {
        ("grpo", Some(true)) => AdvantageEstimator::Grpo,
        ("grpo", Some(false)) => AdvantageEstimator::DrGrpo,
        ("rloo", _) => AdvantageEstimator::Rloo,
        other => panic!("unknown estimator {other:?}"),
    };
    AdvantageConfig::new()
        .with_estimator(estimator)
        .with_epsilon(case["epsilon"].as_f64().unwrap() as f32)
}

#[test]
fn advantages_match_verl_in_every_mode() {
    let all = cases();
    let cases = all["advantages"].as_array().unwrap();
    assert_eq!(cases.len(), 3, "grpo, dr-grpo and rloo cases");
    for case in cases {
        let name = format!(
            "{} norm_by_std={:?}",
            case["estimator"], case["norm_by_std"]
        );
        let rewards: Vec<f32> = vector(case, "rewards").iter().map(|&x| x as f32).collect();
        let index: Vec<&str> = case["index"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap())
            .collect();
        let mask = matrix(case, "response_mask");
        let t = mask[0].len();
        let mask_flat: Vec<f32> = mask.iter().flatten().map(|&x| x as f32).collect();
        let want: Vec<f64> = matrix(case, "token_advantages")
            .into_iter()
            .flatten()
            .collect();

        // verl's convention for groups of one reproduces its output exactly.
        let verl = advantage_config(case).with_singleton_groups(SingletonGroups::Verl);
        let got = token_advantages(&rewards, &index, &mask_flat, t, &verl).unwrap();
        close_all(&name, &got, &want);

        // The default zeroes groups of one and agrees with verl everywhere else.
        let ours =
            token_advantages(&rewards, &index, &mask_flat, t, &advantage_config(case)).unwrap();
        for (b, key) in index.iter().enumerate() {
            let singleton = index.iter().filter(|k| *k == key).count() == 1;
            for j in 0..t {
                let i = b * t + j;
                if singleton {
                    assert_eq!(ours[i], 0.0, "{name}: singleton row {b}");
                } else {
                    close(&format!("{name}[{i}]"), f64::from(ours[i]), want[i]);
                }
            }
        }
    }
}

#[test]
fn policy_loss_matches_verl_in_every_mode() {
    let all = cases();
    let cases = all["policy_loss"].as_array().unwrap();
    assert_eq!(cases.len(), 24);
    let mut modes_seen = std::collections::HashSet::new();
    let device = device();
    for (k, case) in cases.iter().enumerate() {
        let mode: LossAggMode = case["loss_agg_mode"].as_str().unwrap().parse().unwrap();
        modes_seen.insert(mode);
        let mut config = GrpoConfig::rstar2_agent()
            .with_loss_agg_mode(mode)
            .with_clip_ratios(
                case["clip_ratio_low"].as_f64().unwrap() as f32,
                case["clip_ratio_high"].as_f64().unwrap() as f32,
            )
            .with_clip_ratio_c(Some(case["clip_ratio_c"].as_f64().unwrap() as f32));
        if let Some(f) = case["loss_scale_factor"].as_f64() {
            config = config.with_loss_scale_factor(f as f32);
        }
        let name = format!("case {k} ({}, {})", case["case"], mode.as_str());

        let log_prob = t2(&matrix(case, "log_prob"), &device).require_grad();
        let inputs = PolicyLossInputs::new(
            log_prob.clone(),
            t2(&matrix(case, "old_log_prob"), &device),
            t2(&matrix(case, "advantages"), &device),
            t2(&matrix(case, "response_mask"), &device),
        );
        let out = policy_loss(&config, inputs, &GlobalBatch::new()).unwrap();
        let want_loss = case["loss"].as_f64().unwrap();
        close(&format!("{name} loss"), scalar(&out.loss), want_loss);
        close(
            &format!("{name} metrics.loss"),
            f64::from(out.metrics.loss),
            want_loss,
        );

        let m = &case["metrics"];
        close(
            &format!("{name} pg_clipfrac"),
            f64::from(out.metrics.clip_frac),
            m["actor/pg_clipfrac"].as_f64().unwrap(),
        );
        close(
            &format!("{name} ppo_kl"),
            f64::from(out.metrics.ppo_kl),
            m["actor/ppo_kl"].as_f64().unwrap(),
        );
        close(
            &format!("{name} pg_clipfrac_lower"),
            f64::from(out.metrics.dual_clip_frac),
            m["actor/pg_clipfrac_lower"].as_f64().unwrap(),
        );
        // The split of the clip fraction by side adds up to verl's total.
        close(
            &format!("{name} clip sides"),
            f64::from(out.metrics.clip_frac_high + out.metrics.clip_frac_low),
            m["actor/pg_clipfrac"].as_f64().unwrap(),
        );

        let grads = out.loss.backward();
        let grad = log_prob.grad(&grads).expect("gradient wrt log_prob");
        let want: Vec<f64> = matrix(case, "grad_log_prob")
            .into_iter()
            .flatten()
            .collect();
        close_all(&format!("{name} grad"), &values(&grad), &want);
    }
    assert_eq!(modes_seen.len(), 4, "all four aggregation modes covered");
}

#[test]
fn kl_estimators_match_verl() {
    let all = cases();
    let cases = all["kl"].as_array().unwrap();
    let device = device();
    let mut kinds = Vec::new();
    for case in cases {
        let kind = case["kind"].as_str().unwrap();
        let estimator = match kind {
            "kl" => KlEstimator::K1,
            "abs" => KlEstimator::Abs,
            "mse" => KlEstimator::K2,
            "low_var_kl" => KlEstimator::K3,
            other => panic!("unknown kind {other}"),
        };
        kinds.push(estimator);
        let lp = t2(&matrix(case, "log_prob"), &device);
        let rf = t2(&matrix(case, "ref_log_prob"), &device);
        let want: Vec<f64> = matrix(case, "kl").into_iter().flatten().collect();
        for straight_through in [false, true] {
            let got = kl_penalty(lp.clone(), rf.clone(), estimator, straight_through);
            close_all(
                &format!("kl {kind} st={straight_through}"),
                &values(&got),
                &want,
            );
        }
    }
    assert_eq!(kinds.len(), 4);
}
