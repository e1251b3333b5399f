//! `rstar train` end to end: the smoke preset (shrunk further for debug builds) writes every
//! artefact and the table; bad arguments fail with a named field.

use std::process::Command;

use rstar_agent::train::{EvalRow, TrainConfig};
use serde_json::Value;

use super::train_common::small_smoke_config;

pub(super) fn rstar(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rstar"))
        .args(args)
        .env("RSTAR_PYTHON", rstar_testdata::python())
        .output()
        .expect("the rstar binary runs");
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Runs `rstar` with `args`, asserts that it fails, and returns its stderr.
fn refused(args: &[&str]) -> String {
    let (ok, _, stderr) = rstar(args);
    assert!(!ok, "rstar {args:?} succeeded: {stderr}");
    stderr
}

#[test]
fn smoke_run_writes_metrics_evaluations_checkpoints_and_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let config_path = small_smoke_config(dir.path());
    let out = dir.path().join("run");
    let (ok, stdout, stderr) = rstar(&[
        "train",
        "--config",
        config_path.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--seed",
        "3",
    ]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("| phase |") && stdout.contains("| sft |"),
        "{stdout}"
    );
    for stage in ["short", "long", "hard"] {
        assert!(stdout.contains(&format!("| stage {stage} |")), "{stdout}");
        assert!(
            out.join("checkpoints")
                .join(format!("stage-{stage}"))
                .join("config.json")
                .exists()
        );
    }
    // Issue 44: `checkpoints/final` is a stable path to the last stage's policy.
    let final_dir = out.join("checkpoints").join("final");
    assert_eq!(
        std::fs::read_link(&final_dir).unwrap(),
        std::path::Path::new("stage-hard")
    );
    assert!(final_dir.join("model.safetensors").is_file());
    let saved: TrainConfig =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(saved.seed, 3);
    let sft = std::fs::read_to_string(out.join("sft_metrics.jsonl")).unwrap();
    assert_eq!(sft.lines().count(), 8);
    let metrics: Vec<Value> = std::fs::read_to_string(out.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // Two steps in each of three stages; the curriculum's decision on each.
    assert_eq!(metrics.len(), 6);
    let decisions: Vec<&str> = metrics
        .iter()
        .map(|m| m["decision"].as_str().unwrap())
        .collect();
    assert_eq!(
        decisions,
        [
            "stay",
            "advance to `long`",
            "stay",
            "advance to `hard` (optimizer reset)",
            "stay",
            "finish"
        ]
    );
    for m in &metrics {
        for key in [
            "clip_frac",
            "ppo_kl",
            "entropy",
            "time_rollout",
            "time_tools",
            "time_update",
        ] {
            assert!(m[key].is_number(), "{key} in {m}");
        }
        assert!(m["all"]["tool_error_rate_success"].is_number());
        assert_eq!(m["rollouts"], 2 * 2 * 2);
    }
    let evals: Vec<EvalRow> = std::fs::read_to_string(out.join("eval.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(evals.len(), 4);
    assert_eq!(
        evals.iter().map(|e| e.rl_steps).collect::<Vec<_>>(),
        [0, 2, 4, 6]
    );
    assert!(evals.iter().all(|e| e.greedy.count == 4));
    let samples = std::fs::read_to_string(out.join("samples.jsonl")).unwrap();
    assert_eq!(samples.lines().count(), 4);
    assert!(out.join("sft_corpus.jsonl").exists());
}

#[test]
fn a_bad_preset_is_named() {
    let stderr = refused(&["train", "--preset", "huge", "--out", "/nonexistent/x"]);
    assert!(
        stderr.contains("`preset`") && stderr.contains("huge"),
        "{stderr}"
    );
}

#[test]
fn the_paper_preset_needs_a_model_and_data_and_backends_are_checked() {
    let stderr = refused(&[
        "train",
        "--preset",
        "rstar2-agent",
        "--out",
        "/nonexistent/x",
    ]);
    assert!(
        stderr.contains("`init`") && stderr.contains("--model"),
        "{stderr}"
    );
    let stderr = refused(&[
        "train",
        "--preset",
        "rstar2-agent",
        "--model",
        "/nonexistent/model",
        "--out",
        "/nonexistent/x",
    ]);
    assert!(
        stderr.contains("`data`") && stderr.contains("--data"),
        "{stderr}"
    );
    let stderr = refused(&["train", "--backend", "tpu", "--out", "/nonexistent/x"]);
    assert!(
        stderr.contains("`tpu`") && stderr.contains("`wgpu`") && stderr.contains("`gpu`"),
        "{stderr}"
    );
    // A precision that is not one names the two there are.
    let stderr = refused(&["train", "--precision", "fp8", "--out", "/nonexistent/x"]);
    assert!(
        stderr.contains("`fp8` is not a precision") && stderr.contains("`bf16`"),
        "{stderr}"
    );
    // LibTorch is never built in CI: the refusal says how to build it.
    #[cfg(not(feature = "tch"))]
    {
        let stderr = refused(&["train", "--backend", "tch", "--out", "/nonexistent/x"]);
        assert!(
            stderr.contains("without the `tch` feature") && stderr.contains("LIBTORCH_CXX11_ABI=1"),
            "{stderr}"
        );
    }
    // A backend this build lacks names its feature (`cargo xtask ci` builds `wgpu` in, never
    // `cuda`).
    #[cfg(not(feature = "cuda"))]
    {
        let stderr = refused(&["train", "--backend", "cuda", "--out", "/nonexistent/x"]);
        assert!(
            stderr.contains("without the `cuda` feature") && stderr.contains("--features cuda"),
            "{stderr}"
        );
    }
    #[cfg(not(feature = "wgpu"))]
    {
        let stderr = refused(&["train", "--backend", "wgpu", "--out", "/nonexistent/x"]);
        assert!(stderr.contains("without the `wgpu` feature"), "{stderr}");
    }
}

#[test]
fn roc_modes_are_chosen_on_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let config_path = small_smoke_config(dir.path());
    let config = config_path.to_str().unwrap();
    let out = dir.path().join("reference");
    let (ok, _, stderr) = rstar(&[
        "train",
        "--config",
        config,
        "--roc",
        "reference",
        "--out",
        out.to_str().unwrap(),
        "--stop-after-rl-steps",
        "1",
    ]);
    assert!(ok, "{stderr}");
    let saved: TrainConfig =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(saved.rl.roc.mode, rstar_agent::train::RocMode::Reference);
    let line: Value = serde_json::from_str(
        std::fs::read_to_string(out.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    // smoke: 2 prompts, 2G = 4 rollouts each; at most G = 2 kept per group.
    assert_eq!(
        (&line["roc"], &line["rollouts"]),
        (&Value::Bool(true), &Value::from(8))
    );
    assert!(line["kept"]["count"].as_u64().unwrap() <= 4, "{line}");

    let stderr = refused(&["train", "--roc", "sometimes", "--out", "/nonexistent/x"]);
    assert!(
        stderr.contains("--roc") && stderr.contains("sometimes"),
        "{stderr}"
    );
    let stderr = refused(&["train", "--roc", "off", "--no-roc", "--out", "/x"]);
    assert!(stderr.contains("--no-roc"), "{stderr}");
}

#[test]
fn the_paper_presets_resolved_config_warms_up_and_bounds_generation() {
    let (ok, stdout, stderr) = rstar(&["train", "--preset", "rstar2-agent", "--dry-run"]);
    // Printed, then refused: the preset needs --model and --data to run.
    assert!(!ok && stderr.contains("`init`"), "{stderr}");
    let config: TrainConfig = serde_json::from_str(&stdout).unwrap();
    assert_eq!((config.rl.warmup_steps, config.rl.max_batch), (20, 64));
    assert_eq!(config.rl.roc, rstar_agent::train::RocOptions::paper());
}

#[test]
fn issue_62_the_rollout_correction_flags_set_verl_s_keys() {
    use rstar_agent::grpo::{IsThreshold, RolloutIs};
    let (ok, stdout, stderr) = rstar(&["train", "--preset", "smoke", "--dry-run"]);
    assert!(ok, "{stderr}");
    assert!(
        !stdout.contains("rollout_correction"),
        "off by default: {stdout}"
    );
    for (args, level, threshold, json) in [
        (
            &["--rollout-correction", "token"][..],
            RolloutIs::Token,
            IsThreshold::Truncate(2.0),
            r#""rollout_is_threshold": 2.0"#,
        ),
        (
            &[
                "--rollout-correction",
                "sequence",
                "--rollout-is-threshold",
                "0.5_2.0",
            ],
            RolloutIs::Sequence,
            IsThreshold::Mask {
                lower: 0.5,
                upper: 2.0,
            },
            r#""rollout_is_threshold": "0.5_2""#,
        ),
    ] {
        let mut all = vec!["train", "--preset", "smoke", "--dry-run"];
        all.extend_from_slice(args);
        let (ok, stdout, stderr) = rstar(&all);
        assert!(ok, "{stderr}");
        assert!(stdout.contains(json), "{stdout}");
        let config: TrainConfig = serde_json::from_str(&stdout).unwrap();
        let c = config.rl.grpo.rollout_correction;
        assert_eq!(
            (c.rollout_is, c.rollout_is_threshold),
            (Some(level), threshold)
        );
    }
    // Truncation at or below 1 is refused with the key named; a threshold alone too.
    let (ok, _, stderr) = rstar(&[
        "train",
        "--rollout-correction",
        "token",
        "--rollout-is-threshold",
        "1.0",
        "--dry-run",
    ]);
    assert!(
        !ok && stderr.contains("rollout_correction.rollout_is_threshold"),
        "{stderr}"
    );
    let (ok, _, stderr) = rstar(&["train", "--rollout-is-threshold", "2.0", "--dry-run"]);
    assert!(
        !ok && stderr.contains("--rollout-correction token"),
        "{stderr}"
    );
}
