//! Asynchronous RL with a staleness bound (`rl.max_staleness`, issue #64): the gate, the
//! producer driven through its channels (no wall-clock timing), the staleness check, and a
//! run whose steps train on rollouts at most one update old.

use std::sync::mpsc;

use burn::tensor::Device;
use rstar_episode::episode::{Role, StopReason, Trajectory, Turn};
use rstar_episode::template::TemplateFormat;
use rstar_train::rl::StepBatch;
use rstar_train::rl_async::{Gate, Producer, drop_stale, group_staleness, version_of};
use rstar_train::{RolloutDriver, TrainConfig};
use serde_json::Value;

use super::common::{jsonl, tiny_config};

#[test]
fn the_gate_bounds_staleness() {
    // K = 1: step t waits for version t − 2.
    let k1 = Gate::new(1);
    let needs: Vec<u64> = (1..=5).map(|t| k1.needs(t)).collect();
    assert_eq!(needs, [0, 0, 1, 2, 3]);
    // K = 2: t − 3.
    assert_eq!(Gate::new(2).needs(4), 1);
    // K = 0 would be the synchronous loop: t − 1.
    assert_eq!(Gate::new(0).needs(4), 3);
}

#[test]
fn the_producer_rolls_out_ahead_only_as_far_as_k_allows() {
    // The "policy" is its version; each batch reports (step, version) on a channel as it
    // starts, so the test sees what ran without timing anything.
    let (started, seen) = mpsc::channel();
    let producer = Producer::spawn(Gate::new(1), 1, 0, 0u64, move |step, version, p: &u64| {
        assert_eq!(version, *p);
        started.send((step, version)).unwrap();
        Ok((step, version))
    });
    // Steps 1 and 2 roll out with version 0: step 2 while step 1 would train.
    assert_eq!(producer.next().unwrap().batch, (1, 0));
    assert_eq!(producer.next().unwrap().batch, (2, 0));
    assert_eq!(seen.recv().unwrap(), (1, 0));
    assert_eq!(seen.recv().unwrap(), (2, 0));
    // Step 3 cannot start before version 1: had it started, it would carry version 0.
    producer.publish(1, 1);
    let third = producer.next().unwrap();
    assert_eq!((third.step, third.version, third.batch), (3, 1, (3, 1)));
    // A jump ahead: version 3 lets step 4 (needs 2) and step 5 (needs 3) start.
    producer.publish(3, 3);
    assert_eq!(producer.next().unwrap().batch, (4, 3));
    assert_eq!(producer.next().unwrap().batch, (5, 3));
    // An older version published late changes nothing.
    producer.publish(2, 2);
    // Step 6 needs version 4, never published: stopping drops nothing.
    assert_eq!(producer.stop(), 0);
    let all: Vec<(u64, u64)> = seen.try_iter().collect();
    assert_eq!(all, [(3, 1), (4, 3), (5, 3)]);
}

#[test]
fn stopping_the_producer_counts_what_was_rolled_out_for_nothing() {
    let producer = Producer::spawn(Gate::new(2), 1, 0, (), |step, _, _: &()| Ok(step));
    assert_eq!(producer.next().unwrap().batch, 1);
    // Steps 2 and 3 may roll out with version 0 (K = 2); neither is handed out. Whether the
    // stop comes before or after they finish, they are counted once at most; the producer
    // never starts step 4 (it needs version 1).
    let dropped = producer.stop();
    assert!(dropped <= 2, "{dropped}");

    // A failed rollout ends the producer with its error.
    let producer: Producer<(), u64> = Producer::spawn(Gate::new(1), 1, 0, (), |_, _, _| {
        Err(rstar_train::Error::TrainConfig {
            field: "x".into(),
            message: "the engines are gone".into(),
        })
    });
    let err = producer.next().unwrap_err();
    assert!(err.to_string().contains("the engines are gone"), "{err}");
    assert!(producer.next().is_err());
}

fn trajectory(id: &str, sample: u32, versions: &[&str]) -> Trajectory {
    Trajectory {
        id: id.into(),
        sample,
        template: TemplateFormat::Compact,
        prompt: String::new(),
        prompt_ids: vec![],
        response_ids: vec![0; versions.len()],
        loss_mask: vec![1; versions.len()],
        turns: versions
            .iter()
            .enumerate()
            .map(|(i, v)| Turn {
                role: Role::Assistant,
                text: "A:".into(),
                start: i,
                len: 1,
                weight_version: Some(v.to_string()),
            })
            .collect(),
        tool_calls: vec![],
        stop: StopReason::NoToolCall,
        truncated: false,
        ground_truth: Some("1".into()),
        answer: None,
        reward: Some(0.0),
        entropies: vec![],
        token_logprobs: vec![],
        token_texts: vec![],
    }
}

#[test]
fn a_group_from_version_0_is_dropped_when_version_2_trains_and_counted() {
    assert_eq!(version_of("step-12"), Some(12));
    assert_eq!(version_of("default"), None);
    // Group `a` has one turn from version 0: as stale as its oldest turn.
    let a = [
        trajectory("a", 0, &["step-1", "step-1"]),
        trajectory("a", 1, &["step-0", "step-1"]),
    ];
    assert_eq!(group_staleness(&a, 2, 2), 2);
    let b = [
        trajectory("b", 0, &["step-1"]),
        trajectory("b", 1, &["step-1"]),
    ];
    let c = [
        trajectory("c", 0, &["step-2"]),
        trajectory("c", 1, &["default"]),
    ];
    let mut batch = StepBatch {
        prompts: 3,
        trajectories: a.iter().chain(&b).chain(&c).cloned().collect(),
        // RoC kept one of each group.
        kept: vec![1, 2, 5],
        roc_metrics: Default::default(),
        stats: Default::default(),
        gap: None,
        dispatch: None,
        tool_latency: None,
        weight_version: None,
        published: None,
    };
    // Version 2 trains with K = 1; a turn that names no version counts as the batch's (2).
    let record = drop_stale(&mut batch, 2, 1, 2);
    assert_eq!(record.dropped_groups, 1);
    let histogram: Vec<(&str, usize)> = record
        .staleness
        .iter()
        .map(|(k, v)| (k.as_str(), *v))
        .collect();
    assert_eq!(histogram, [("0", 1), ("1", 1), ("2", 1)]);
    // Group `a` is gone from the rollouts and from RoC's choice, whose indices follow.
    let ids: Vec<&str> = batch.trajectories.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["b", "b", "c", "c"]);
    assert_eq!(batch.kept, [0, 3]);
    assert_eq!(
        batch.trajectories[batch.kept[1]].turns[0]
            .weight_version
            .as_deref(),
        Some("default")
    );

    // With K = 2 nothing is dropped.
    let mut all = StepBatch {
        kept: vec![0, 1, 2, 3, 4, 5],
        trajectories: a.iter().chain(&b).chain(&c).cloned().collect(),
        ..batch
    };
    assert_eq!(drop_stale(&mut all, 2, 2, 2).dropped_groups, 0);
    assert_eq!(all.trajectories.len(), 6);
}

#[test]
fn an_asynchronous_run_trains_on_rollouts_at_most_k_updates_old() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = TrainConfig::smoke();
    config.model = tiny_config();
    config.sft.steps = 2;
    config.sft.corpus_size = 4;
    config.sft.log_every = 0;
    config.eval.problems = 2;
    config.tools.python = rstar_testdata::python();
    config.tools.workers = 2;
    config.rl.rollout_driver = RolloutDriver::Scheduled;
    config.rl.max_staleness = 1;
    // A checkpoint every step (the smoke preset's): the producer still rolls out ahead.
    config.checkpoint_every = 1;
    for stage in &mut config.curriculum.stages {
        stage.steps = Some(4);
    }
    let out = dir.path().join("run");
    let mut log = Vec::new();
    let report = rstar_train::run(&config, &out, &Device::flex(), |l| log.push(l.to_string()))
        .unwrap_or_else(|e| panic!("the run fails: {e}\n{}", log.join("\n")));
    assert!(report.finished);

    let metrics: Vec<Value> = jsonl(&out.join("metrics.jsonl"));
    assert_eq!(metrics.len(), 4 * config.curriculum.stages.len());
    let mut stale_steps = 0;
    let mut stage_start = 1;
    let mut last_stage = metrics[0]["stage"].as_u64().unwrap();
    for m in &metrics {
        let step = m["step"].as_u64().unwrap();
        let stage = m["stage"].as_u64().unwrap();
        if stage != last_stage {
            (stage_start, last_stage) = (step, stage);
        }
        let a = &m["asynchronous"];
        assert_eq!(a["max_staleness"], 1, "{m}");
        assert_eq!(a["dropped_groups"], 0, "{m}");
        let version = a["version"].as_u64().unwrap();
        // At most one update old, never newer than the policy trained.
        assert!(
            version + 1 >= step - 1 && version < step,
            "step {step}: {a}"
        );
        // A stage's first step rolls out with the policy it trains: nothing was in flight
        // across the stage's start.
        if step == stage_start {
            assert_eq!(version, step - 1, "step {step}: {a}");
        }
        let staleness = a["staleness"].as_object().unwrap();
        let groups: u64 = staleness.values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(groups, m["prompts"].as_u64().unwrap(), "{m}");
        assert_eq!(
            staleness.keys().collect::<Vec<_>>(),
            [&(step - 1 - version).to_string()],
            "{m}"
        );
        stale_steps += usize::from(version + 1 == step - 1);
        assert!(a["engine_idle_secs"].as_f64().unwrap() >= 0.0);
        assert!(a["trainer_idle_secs"].as_f64().unwrap() >= 0.0);
    }
    // The engines did roll out ahead: some step trained on the previous version's groups (the
    // producer takes the newest version as each batch starts; the trainer only publishes after
    // an update, so a step may also find its own).
    assert!(stale_steps > 0, "{metrics:?}");
}

#[test]
fn asynchronous_rl_needs_the_scheduled_driver() {
    let mut config = TrainConfig::smoke();
    config.rl.max_staleness = 1;
    config.rl.rollout_driver = RolloutDriver::Lockstep;
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("rl.max_staleness"), "{err}");
    assert!(err.contains("scheduled"), "{err}");
    config.rl.rollout_driver = RolloutDriver::Scheduled;
    config.validate().unwrap();
    // K = 0 is the synchronous loop, and a config that leaves it so reads and writes as
    // before the key existed.
    config.rl.max_staleness = 0;
    let text = serde_json::to_string(&config).unwrap();
    assert!(!text.contains("max_staleness"), "{text}");
}
