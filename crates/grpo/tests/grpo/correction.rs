//! Issue #61: rollout correction (TIS, IcePop, rejection) and GSPO reproduce verl 0.9.1's own
//! outputs (tests/data/rollout_correction.json): weights, masks (exactly), every metric by name,
//! losses and gradients within 1e-5 (relative above 1).

use std::collections::BTreeMap;

use burn::tensor::Tensor;
use rstar_grpo::{
    GlobalBatch, GrpoConfig, GrpoError, LossAggMode, PolicyLossInputs, PolicyLossMode,
    RolloutCorrectionConfig, mismatch_metrics, policy_loss, rollout_correction,
};
use serde_json::Value;

use super::common::{device, json_matrix as matrix, scalar, t2, values};

fn cases() -> &'static Value {
    static CASES: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    CASES.get_or_init(|| {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/rollout_correction.json"
        );
        let text = std::fs::read_to_string(path).expect("tests/data/rollout_correction.json");
        serde_json::from_str(&text).expect("rollout_correction.json is JSON")
    })
}

fn flat(v: &Value) -> Vec<f32> {
    matrix(v).into_iter().flatten().map(|x| x as f32).collect()
}

/// The named input (A, B or C).
fn input(name: &str) -> &'static Value {
    cases()["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == name)
        .unwrap_or_else(|| panic!("input {name}"))
}

fn correction_config(id: &Value) -> RolloutCorrectionConfig {
    match id.as_str() {
        None => RolloutCorrectionConfig::off(),
        Some(id) => {
            let case = cases()["corrections"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["id"] == id)
                .unwrap_or_else(|| panic!("correction {id}"));
            serde_json::from_value(case["config"].clone())
                .unwrap_or_else(|e| panic!("{id}: config {}: {e}", case["config"]))
        }
    }
}

fn close(what: &str, got: f64, want: f64) {
    let tol = 1e-5 * want.abs().max(1.0);
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got}, verl {want} (diff {:e})",
        (got - want).abs()
    );
}

fn close_all(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        close(&format!("{what}[{i}]"), f64::from(g), f64::from(w));
    }
}

fn dims(input: &Value) -> (usize, usize) {
    let m = matrix(&input["response_mask"]);
    (m.len(), m[0].len())
}

#[test]
fn corrections_match_verl() {
    let all = cases()["corrections"].as_array().unwrap();
    assert_eq!(all.len(), 135);
    for case in all {
        let id = case["id"].as_str().unwrap();
        let inp = input(case["input"].as_str().unwrap());
        let (rows, cols) = dims(inp);
        let config = correction_config(&case["id"]);
        let got = rollout_correction(
            &config,
            &flat(&inp["old_log_prob"]),
            &flat(&inp["rollout_log_prob"]),
            &flat(&inp["response_mask"]),
            rows,
            cols,
        )
        .unwrap_or_else(|e| panic!("{id}: {e}"));
        match (&got.weights, case["rollout_is_weights"].is_null()) {
            (None, true) => {}
            (Some(w), false) => close_all(
                &format!("{id} weights"),
                w,
                &flat(&case["rollout_is_weights"]),
            ),
            (w, _) => panic!("{id}: weights {w:?}"),
        }
        assert_eq!(
            got.response_mask,
            flat(&case["modified_response_mask"]),
            "{id}: the modified mask"
        );
        let want: BTreeMap<String, f64> = case["metrics"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
            .collect();
        assert_eq!(
            got.metrics.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "{id}: metric names"
        );
        for (k, v) in &want {
            close(&format!("{id} {k}"), got.metrics[k], *v);
        }
    }
}

#[test]
fn mismatch_metrics_match_verl() {
    let all = cases()["actor_offpolicy_metrics"].as_array().unwrap();
    assert_eq!(all.len(), 3);
    for case in all {
        let inp = input(case["input"].as_str().unwrap());
        let (rows, cols) = dims(inp);
        let got = mismatch_metrics(
            &flat(&inp["log_prob"]),
            &flat(&inp["rollout_log_prob"]),
            &flat(&inp["response_mask"]),
            rows,
            cols,
        )
        .unwrap();
        let want = case["metrics"].as_object().unwrap();
        assert_eq!(got.len(), want.len(), "{:?}", got.keys());
        for (k, v) in want {
            close(k, got[k], v.as_f64().unwrap());
        }
    }
}

/// The loss, the gradient with respect to `log_prob` and verl's three actor metrics.
struct Run {
    loss: f64,
    grad: Vec<f32>,
    clipfrac: f32,
    ppo_kl: f32,
    clipfrac_lower: f32,
}

fn run(config: &GrpoConfig, inp: &Value) -> Result<Run, GrpoError> {
    let dev = device();
    let log_prob: Tensor<2> = t2(&matrix(&inp["log_prob"]), &dev).require_grad();
    let inputs = PolicyLossInputs::new(
        log_prob.clone(),
        t2(&matrix(&inp["old_log_prob"]), &dev),
        t2(&matrix(&inp["advantages"]), &dev),
        t2(&matrix(&inp["response_mask"]), &dev),
    )
    .with_rollout_log_prob(t2(&matrix(&inp["rollout_log_prob"]), &dev));
    let out = policy_loss(config, inputs, &GlobalBatch::new())?;
    let grads = out.loss.backward();
    Ok(Run {
        loss: scalar(&out.loss),
        grad: values(&log_prob.grad(&grads).expect("a gradient")),
        clipfrac: out.metrics.clip_frac,
        ppo_kl: out.metrics.ppo_kl,
        clipfrac_lower: out.metrics.dual_clip_frac,
    })
}

fn check(what: &str, got: &Run, want: &Value) {
    close(
        &format!("{what} loss"),
        got.loss,
        want["loss"].as_f64().unwrap(),
    );
    close_all(
        &format!("{what} grad"),
        &got.grad,
        &flat(&want["grad_log_prob"]),
    );
    let m = &want["metrics"];
    close(
        &format!("{what} pg_clipfrac"),
        f64::from(got.clipfrac),
        m["actor/pg_clipfrac"].as_f64().unwrap(),
    );
    close(
        &format!("{what} ppo_kl"),
        f64::from(got.ppo_kl),
        m["actor/ppo_kl"].as_f64().unwrap(),
    );
    close(
        &format!("{what} pg_clipfrac_lower"),
        f64::from(got.clipfrac_lower),
        m["actor/pg_clipfrac_lower"].as_f64().unwrap(),
    );
}

fn mode(v: &Value) -> LossAggMode {
    v.as_str().unwrap().parse().unwrap()
}

fn vanilla(correction: RolloutCorrectionConfig, case: &Value) -> GrpoConfig {
    let f = |k: &str| case[k].as_f64().unwrap() as f32;
    GrpoConfig::new()
        .with_clip_ratios(f("clip_ratio_low"), f("clip_ratio_high"))
        .with_clip_ratio_c(Some(f("clip_ratio_c")))
        .with_loss_agg_mode(mode(&case["loss_agg_mode"]))
        .with_rollout_correction(correction)
}

#[test]
fn vanilla_loss_with_correction_matches_verl_and_a_fully_rejected_batch_is_refused() {
    let (mut checked, mut refused) = (0, 0);
    for case in cases()["corrections"].as_array().unwrap() {
        let id = case["id"].as_str().unwrap();
        let inp = input(case["input"].as_str().unwrap());
        let want = &case["policy_loss_vanilla"];
        let correction = correction_config(&case["id"]);
        if want.is_null() {
            // verl's token-mean over no token is NaN; here it is an error.
            let config = GrpoConfig::new().with_rollout_correction(correction);
            match run(&config, inp) {
                Err(GrpoError::EmptyBatch { what: "tokens" }) => refused += 1,
                Err(e) => panic!("{id}: {e}"),
                Ok(r) => panic!("{id}: a loss {} over no token", r.loss),
            }
            continue;
        }
        let got = run(&vanilla(correction, want), inp).unwrap_or_else(|e| panic!("{id}: {e}"));
        check(id, &got, want);
        checked += 1;
    }
    assert_eq!((checked, refused), (124, 11));
}

#[test]
fn vanilla_aggregation_sweep_matches_verl() {
    let all = cases()["vanilla_agg_sweep"].as_array().unwrap();
    assert_eq!(all.len(), 240);
    let mut modes = std::collections::BTreeSet::new();
    for (i, case) in all.iter().enumerate() {
        let inp = input(case["input"].as_str().unwrap());
        let config = vanilla(correction_config(&case["correction_id"]), case);
        modes.insert(config.loss_agg_mode.as_str());
        let what = format!(
            "sweep[{i}] {} {}",
            case["correction_id"], case["loss_agg_mode"]
        );
        let got = run(&config, inp).unwrap_or_else(|e| panic!("{what}: {e}"));
        check(&what, &got, case);
    }
    assert_eq!(modes.len(), 5, "{modes:?}");
}

#[test]
fn gspo_matches_verl() {
    let all = cases()["gspo"].as_array().unwrap();
    assert_eq!(all.len(), 42);
    for (i, case) in all.iter().enumerate() {
        let inp = input(case["input"].as_str().unwrap());
        let f = |k: &str| case[k].as_f64().unwrap() as f32;
        let config = GrpoConfig::new()
            .with_policy_loss(PolicyLossMode::Gspo)
            .with_clip_ratios(f("clip_ratio_low"), f("clip_ratio_high"))
            .with_loss_agg_mode(mode(&case["loss_agg_mode"]))
            .with_rollout_correction(correction_config(&case["correction_id"]));
        let what = format!(
            "gspo[{i}] {} {} {}/{}",
            case["correction_id"],
            case["loss_agg_mode"],
            case["clip_ratio_low"],
            case["clip_ratio_high"]
        );
        let got = run(&config, inp).unwrap_or_else(|e| panic!("{what}: {e}"));
        check(&what, &got, case);
    }
}

#[test]
fn a_correction_that_is_off_leaves_the_loss_bit_for_bit() {
    let inp = input("A");
    let dev = device();
    let run_with = |rollout: bool| {
        let log_prob: Tensor<2> = t2(&matrix(&inp["log_prob"]), &dev).require_grad();
        let mut inputs = PolicyLossInputs::new(
            log_prob.clone(),
            t2(&matrix(&inp["old_log_prob"]), &dev),
            t2(&matrix(&inp["advantages"]), &dev),
            t2(&matrix(&inp["response_mask"]), &dev),
        );
        if rollout {
            inputs = inputs.with_rollout_log_prob(t2(&matrix(&inp["rollout_log_prob"]), &dev));
        }
        let out = policy_loss(&GrpoConfig::new(), inputs, &GlobalBatch::new()).unwrap();
        assert!(out.correction.is_none());
        let grad = values(&log_prob.grad(&out.loss.backward()).unwrap());
        (
            scalar(&out.loss).to_bits(),
            grad.iter().map(|g| g.to_bits()).collect::<Vec<_>>(),
            out.metrics,
        )
    };
    assert_eq!(run_with(false), run_with(true));
}

#[test]
fn a_correction_without_the_engine_s_log_probs_is_refused() {
    let inp = input("A");
    let dev = device();
    let inputs = PolicyLossInputs::new(
        t2(&matrix(&inp["log_prob"]), &dev),
        t2(&matrix(&inp["old_log_prob"]), &dev),
        t2(&matrix(&inp["advantages"]), &dev),
        t2(&matrix(&inp["response_mask"]), &dev),
    );
    let config = GrpoConfig::new()
        .with_rollout_correction(RolloutCorrectionConfig::preset("decoupled_token_is").unwrap());
    let err = policy_loss(&config, inputs, &GlobalBatch::new()).unwrap_err();
    assert!(
        matches!(&err, GrpoError::Config { field: "rollout_correction", reason } if reason.contains("rollout_log_prob")),
        "{err}"
    );
}

#[test]
fn verl_s_presets_are_the_fixture_s() {
    let presets = cases()["generator"]["config"]["presets"]
        .as_object()
        .unwrap();
    for (name, want) in presets {
        if want["bypass_mode"] == true {
            assert!(RolloutCorrectionConfig::preset(name).is_err(), "{name}");
            continue;
        }
        let mut keys = want.clone();
        let keys = keys.as_object_mut().unwrap();
        keys.remove("bypass_mode");
        keys.remove("loss_type");
        let from_verl: RolloutCorrectionConfig =
            serde_json::from_value(Value::Object(keys.clone())).unwrap();
        assert_eq!(
            RolloutCorrectionConfig::preset(name).unwrap(),
            from_verl,
            "{name}"
        );
    }
}
