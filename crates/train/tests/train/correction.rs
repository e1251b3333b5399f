//! Issue #62: the rollout correction in the trainer's step. Each rollout path keeps the engine's
//! log-prob of every assistant token and the weight version of every turn; the loss weighs its
//! tokens with them (`rl.grpo.rollout_correction`), and the step records verl's
//! `rollout_corr/…` metrics. In f32 the engines' log-probs are the trainer's own recompute, so
//! the weights are 1; in bf16 they move away from 1 and are reported.

use std::sync::Arc;

use rstar_curriculum::Stage;
use rstar_episode::episode::{Role, Trajectory};
use rstar_grpo::{IsThreshold, RolloutCorrectionConfig, RolloutIs};
use rstar_policy::{Precision, Tokenizer};
use rstar_rollout::scheduled::AsyncTools;
use rstar_train::rl::{self, StepInputs, StepRecord};
use rstar_train::{RlOptions, RolloutDriver, TrainConfig, optim::adamw};

use super::common::{overfit_trainable, prompts, tasks, tools};

fn options(
    driver: RolloutDriver,
    precision: Precision,
    correction: RolloutCorrectionConfig,
) -> RlOptions {
    let mut o = TrainConfig::smoke().rl;
    o.group_size = 4;
    o.prompts_per_step = 4;
    o.rollout_driver = driver;
    o.precision = precision;
    o.grpo.rollout_correction = correction;
    o
}

fn one_step(o: &RlOptions) -> (StepRecord, Vec<Trajectory>) {
    let ts = tasks(4, 8);
    let model = overfit_trainable(&ts, 100);
    let stage = Stage::new("s", 160, 3).steps(1);
    let pool = prompts(&ts);
    let inputs = StepInputs {
        step: 1,
        stage: &stage,
        stage_index: 0,
        pool: &pool,
        options: o,
        seed: 4,
        template: rstar_episode::template::TemplateFormat::Compact,
        tool_latency_budget_secs: None,
        policy_version: None,
    };
    let async_tools: Arc<dyn AsyncTools> = Arc::new(tools());
    let (_, record, trajectories) = rl::step(
        model,
        &mut adamw(0.0),
        &Tokenizer::char(),
        &inputs,
        rl::StepTools::new(&tools()).scheduled(async_tools),
    )
    .unwrap();
    (record, trajectories)
}

fn token_tis() -> RolloutCorrectionConfig {
    RolloutCorrectionConfig::is(RolloutIs::Token, IsThreshold::Truncate(2.0))
}

fn metric(record: &StepRecord, name: &str) -> f64 {
    *record
        .rollout_corr
        .get(&format!("rollout_corr/{name}"))
        .unwrap_or_else(|| panic!("no {name} in {:?}", record.rollout_corr.keys()))
}

#[test]
fn in_f32_the_engines_log_probs_are_the_trainer_s_and_every_turn_has_its_version() {
    for driver in [RolloutDriver::Lockstep, RolloutDriver::Scheduled] {
        let (record, trajectories) = one_step(&options(driver, Precision::F32, token_tis()));
        for t in &trajectories {
            assert_eq!(
                t.token_logprobs.len(),
                t.assistant_token_count(),
                "{driver:?}: {}#{}",
                t.id,
                t.sample
            );
            for turn in &t.turns {
                let want = (turn.role == Role::Assistant).then_some("step-0");
                assert_eq!(turn.weight_version.as_deref(), want, "{driver:?}");
            }
        }
        assert!(record.kept.count > 0, "{record:?}");
        // The engine's log-probs (cached decoding) against the trainer's recompute (one
        // forward over the whole sequence), on every kept token.
        let kl = metric(&record, "kl");
        let (max, min) = (
            metric(&record, "rollout_is_max"),
            metric(&record, "rollout_is_min"),
        );
        eprintln!(
            "{driver:?} f32: kl {kl:e}, k3 {:e}, IS max {max}, min {min}",
            metric(&record, "k3_kl")
        );
        assert!(kl.abs() < 1e-5, "{driver:?}: {:?}", record.rollout_corr);
        assert!(
            (max - 1.0).abs() < 1e-4 && (min - 1.0).abs() < 1e-4,
            "{driver:?}: {:?}",
            record.rollout_corr
        );
        assert!((metric(&record, "rollout_is_mean") - 1.0).abs() < 1e-5);
        // The record keeps verl's names, in metrics.jsonl as in memory.
        let line = serde_json::to_string(&record).unwrap();
        assert!(line.contains("\"rollout_corr/rollout_is_mean\""), "{line}");
    }
}

#[test]
fn in_bf16_the_weights_move_away_from_one_and_are_reported() {
    let (record, _) = one_step(&options(
        RolloutDriver::Lockstep,
        Precision::Bf16,
        token_tis(),
    ));
    let (kl, max, min) = (
        metric(&record, "kl"),
        metric(&record, "rollout_is_max"),
        metric(&record, "rollout_is_min"),
    );
    eprintln!(
        "bf16: kl {kl:e}, IS max {max}, min {min}, {:?}",
        record.rollout_corr
    );
    assert!(
        kl != 0.0 && (max > 1.0 || min < 1.0),
        "{:?}",
        record.rollout_corr
    );
    assert!(max <= 2.0, "truncated at 2");
}

#[test]
fn with_the_correction_off_nothing_is_kept_or_reported() {
    let (record, trajectories) = one_step(&options(
        RolloutDriver::Scheduled,
        Precision::F32,
        RolloutCorrectionConfig::off(),
    ));
    assert!(record.rollout_corr.is_empty());
    assert!(trajectories.iter().all(|t| t.token_logprobs.is_empty()));
    let line = serde_json::to_string(&record).unwrap();
    assert!(!line.contains("rollout_corr"), "{line}");
}

#[test]
fn what_the_trainer_does_not_apply_yet_is_refused_by_name() {
    for (json, field) in [
        (
            r#"{"rollout_is": "token", "rollout_rs": "token_k1", "rollout_rs_threshold": 2.0}"#,
            "rl.grpo.rollout_correction.rollout_rs",
        ),
        (
            r#"{"rollout_is": "token", "rollout_is_batch_normalize": true}"#,
            "rl.grpo.rollout_correction.rollout_is_batch_normalize",
        ),
    ] {
        let mut config = TrainConfig::smoke();
        config.rl.grpo.rollout_correction = serde_json::from_str(json).unwrap();
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains(field), "{err}");
    }
    let mut config = TrainConfig::smoke();
    config.rl.grpo.rollout_correction =
        serde_json::from_str(r#"{"rollout_is": "token", "rollout_is_threshold": 0.9}"#).unwrap();
    let err = config.validate().unwrap_err().to_string();
    assert!(
        err.contains("rollout_correction.rollout_is_threshold"),
        "{err}"
    );
}
