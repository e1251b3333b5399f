//! `rstar train --resume`: a run stopped mid-SFT and mid-RL (as a kill would leave it, with a
//! half-written metrics line) and resumed, and a run killed with SIGKILL and resumed, end with
//! the same metrics as an uninterrupted run; finished runs, directories without checkpoints and
//! config-changing flags are reported.

use std::path::Path;

use rstar_agent::train::TrainConfig;
use serde_json::Value;

use rstar_policy::{Tokenizer, WeightDtype, save_dir};

use super::train::rstar;
use super::train_common::{overfit, prompts, tasks, tiny_config};

/// The smoke preset shrunk for debug builds, starting from a small policy trained on the
/// problems of a dataset file (`--data`), so that RL steps see mixed rewards and update the
/// policy and AdamW's moments. Written to `dir/smoke.json`.
pub(super) fn config_file(dir: &Path) -> String {
    let ts = tasks(8, 21);
    let model = overfit(&ts, 100);
    let init = dir.join("init");
    save_dir(&model, &Tokenizer::char(), &init, WeightDtype::F32).unwrap();
    let data = dir.join("problems.jsonl");
    let lines: Vec<String> = prompts(&ts)
        .iter()
        .map(|p| serde_json::to_string(p).unwrap())
        .collect();
    std::fs::write(&data, lines.join("\n") + "\n").unwrap();
    let mut config = TrainConfig::smoke();
    config.model = tiny_config();
    config.init = Some(init);
    config.data = Some(data);
    config.sft.steps = 4;
    config.sft.corpus_size = 6;
    config.sft.lr = 1e-4;
    config.rl.lr = 1e-3;
    // A gain group of its own (the presets' 300 would put the gains at 0.3 a step here).
    config.rl.gain_lr_multiplier = 3.0;
    config.rl.group_size = 4;
    config.rl.prompts_per_step = 4;
    config.tools.workers = 2;
    for stage in &mut config.curriculum.stages {
        stage.max_response_tokens = 160;
        // Near the small policy's greedy decoding (25% of these problems solved), so that
        // RL steps see mixed rewards; at T = 1 it solves almost none.
        stage.temperature = 0.6;
    }
    let path = dir.join("smoke.json");
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).unwrap();
    path.to_str().unwrap().to_string()
}

/// `text` without the sandbox's wall-clock `execution time: 0.01s` figures.
fn without_execution_times(text: &str) -> String {
    const KEY: &str = "execution time: ";
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find(KEY) {
        out.push_str(&rest[..i + KEY.len()]);
        rest = rest[i + KEY.len()..].trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
    }
    out.push_str(rest);
    out
}

/// The lines of a JSONL file with the wall-clock fields removed (step times, the tool calls'
/// latencies, of which the count of calls stays, and the execution times in the tool
/// responses that trajectories record).
pub(super) fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(&without_execution_times(l)).unwrap();
            if let Some(m) = v.as_object_mut() {
                m.retain(|k, _| !k.starts_with("time_") && k != "secs" && !k.ends_with("per_sec"));
                if let Some(latency) = m.get_mut("tool_latency").and_then(Value::as_object_mut) {
                    latency.retain(|k, _| k == "calls" || k == "budget_secs");
                }
            }
            v
        })
        .collect()
}

pub(super) fn train(args: &[&str]) -> String {
    let (ok, stdout, stderr) = rstar(args);
    assert!(ok, "rstar {args:?} failed: {stderr}");
    stdout + &stderr
}

#[test]
fn a_killed_and_resumed_run_ends_like_an_uninterrupted_one() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path());
    let whole = dir.path().join("whole");
    let parts = dir.path().join("parts");
    let (whole_s, parts_s) = (whole.to_str().unwrap(), parts.to_str().unwrap());
    train(&[
        "train", "--config", &config, "--out", whole_s, "--seed", "5",
    ]);

    // Stopped after SFT step 2 of 4, then after RL step 2 (the end of stage `short`, with
    // AdamW moments that step 3 goes on from), then after step 5 (in the hard stage, whose problems were chosen at step 5).
    let out = train(&[
        "train",
        "--config",
        &config,
        "--out",
        parts_s,
        "--seed",
        "5",
        "--stop-after-sft-steps",
        "2",
    ]);
    assert!(out.contains("stopped early"), "{out}");
    assert_eq!(records(&parts.join("sft_metrics.jsonl")).len(), 2);
    assert!(
        !parts.join("metrics.jsonl").exists() || records(&parts.join("metrics.jsonl")).is_empty()
    );
    let out = train(&["train", "--resume", parts_s, "--stop-after-rl-steps", "2"]);
    assert!(out.contains("after 2 SFT steps and 0 RL steps"), "{out}");
    assert_eq!(records(&parts.join("metrics.jsonl")).len(), 2);
    // A kill in the middle of step 3 leaves a partial line; the resume drops it.
    let metrics = parts.join("metrics.jsonl");
    let mut text = std::fs::read_to_string(&metrics).unwrap();
    text.push_str("{\"step\":3,\"stage\":1,\"stage_na");
    std::fs::write(&metrics, text).unwrap();
    train(&["train", "--resume", parts_s, "--stop-after-rl-steps", "5"]);
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(parts.join("checkpoints/last/state.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(state["rl_steps"], 5);
    assert_eq!(state["stage_pool"]["stage"], 2);
    let out = train(&["train", "--resume", parts_s]);
    assert!(out.contains("| stage hard |"), "{out}");

    // A real kill: SIGKILL once the checkpoint after RL step 3 is there (wherever the process
    // is then: in step 4, writing a metrics line or a checkpoint), then a resume.
    let killed = dir.path().join("killed");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rstar"))
        .args([
            "train",
            "--config",
            &config,
            "--out",
            killed.to_str().unwrap(),
            "--seed",
            "5",
        ])
        .env("RSTAR_PYTHON", rstar_testdata::python())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let state = killed.join("checkpoints/last/state.json");
    loop {
        let text = std::fs::read_to_string(&state).unwrap_or_default();
        if text.contains("\"rl_steps\": 3") || child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait().unwrap();
    train(&["train", "--resume", killed.to_str().unwrap()]);

    for (file, run) in [
        "sft_metrics.jsonl",
        "metrics.jsonl",
        "eval.jsonl",
        "samples.jsonl",
    ]
    .into_iter()
    .flat_map(|f| [(f, &parts), (f, &killed)])
    {
        let (a, b) = (records(&whole.join(file)), records(&run.join(file)));
        assert!(!a.is_empty(), "{file}");
        assert_eq!(a.len(), b.len(), "{file}");
        for (i, (a, b)) in a.iter().zip(&b).enumerate() {
            let differ: Vec<&String> = a
                .as_object()
                .unwrap()
                .iter()
                .filter(|(k, v)| b.get(k.as_str()) != Some(v))
                .map(|(k, _)| k)
                .collect();
            assert!(
                differ.is_empty(),
                "{} line {}: {differ:?} differ",
                run.join(file).display(),
                i + 1
            );
            assert_eq!(a, b, "{file} line {}", i + 1);
        }
    }
    // TensorBoard: each resume replaced the event file and wrote the kept lines again, so
    // every scalar is there once, at its step, as in the JSONL files.
    for run in [&parts, &killed] {
        let events = super::train_tensorboard::assert_events_match_jsonl(run, &run.join("tb"));
        assert_eq!(events.files.len(), 1, "{:?}", events.files);
    }
    // There was something to get wrong: the SFT loss moved, and RL updated the policy (and
    // AdamW's moments) in the steps before and after the resumes.
    let sft = records(&whole.join("sft_metrics.jsonl"));
    assert_ne!(sft[0]["loss"], sft[3]["loss"]);
    let updates: Vec<u64> = records(&whole.join("metrics.jsonl"))
        .iter()
        .map(|m| m["updates"].as_u64().unwrap())
        .collect();
    eprintln!("updates per RL step: {updates:?}");
    assert!(updates[..2].iter().any(|&u| u > 0), "{updates:?}");
    // An update after the resume at step 2 starts from the moments the checkpoint restored.
    assert!(updates[2..].iter().any(|&u| u > 0), "{updates:?}");
    assert!(whole.join("plots/reward.svg").exists() && parts.join("plots/reward.svg").exists());

    // A finished run says so and trains nothing.
    let (ok, stdout, stderr) = rstar(&["train", "--resume", whole_s]);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("already finished"), "{stderr}");
    assert!(stdout.contains("| stage hard |"), "{stdout}");
    assert_eq!(records(&whole.join("metrics.jsonl")).len(), 6);
}

#[test]
fn resume_errors_name_the_path_and_the_refused_flags() {
    let dir = tempfile::tempdir().unwrap();
    // No config.json: not a run directory.
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let (ok, _, stderr) = rstar(&["train", "--resume", empty.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        stderr.contains("empty") && stderr.contains("not a run directory"),
        "{stderr}"
    );
    // A config but no checkpoint.
    std::fs::write(
        empty.join("config.json"),
        serde_json::to_string(&TrainConfig::smoke()).unwrap(),
    )
    .unwrap();
    let (ok, _, stderr) = rstar(&["train", "--resume", empty.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        stderr.contains("checkpoints/last") && stderr.contains("no checkpoint"),
        "{stderr}"
    );
    // Flags that would change the saved config are refused.
    let (ok, _, stderr) = rstar(&[
        "train",
        "--resume",
        empty.to_str().unwrap(),
        "--seed",
        "2",
        "--no-roc",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("--seed, --no-roc") && stderr.contains("would change it"),
        "{stderr}"
    );
}

/// With `--checkpoint-every 3`, a run stopped (as a kill would leave it) after RL step 5 holds
/// the checkpoint of step 4 (the end of stage `long`: evaluations are always checkpointed) and
/// a fifth metrics line; the resume drops that line, replays step 5 and ends like a run
/// checkpointed after every step. Stopped after SFT step 2, before any
/// checkpoint, there is nothing to resume.
#[test]
fn a_run_checkpointed_every_3_steps_replays_what_a_kill_lost() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path());
    let whole = dir.path().join("whole");
    let sparse = dir.path().join("sparse");
    let early = dir.path().join("early");
    let (whole_s, sparse_s, early_s) = (
        whole.to_str().unwrap(),
        sparse.to_str().unwrap(),
        early.to_str().unwrap(),
    );
    train(&[
        "train", "--config", &config, "--out", whole_s, "--seed", "5",
    ]);

    let every = ["--checkpoint-every", "3"];
    train(
        &[
            &[
                "train", "--config", &config, "--out", early_s, "--seed", "5",
            ][..],
            &every,
            &["--stop-after-sft-steps", "2"],
        ]
        .concat(),
    );
    assert_eq!(records(&early.join("sft_metrics.jsonl")).len(), 2);
    let (ok, _, stderr) = rstar(&["train", "--resume", early_s]);
    assert!(!ok && stderr.contains("no checkpoint"), "{stderr}");

    train(
        &[
            &[
                "train", "--config", &config, "--out", sparse_s, "--seed", "5",
            ][..],
            &every,
            &["--stop-after-rl-steps", "5"],
        ]
        .concat(),
    );
    let state: Value = serde_json::from_str(
        &std::fs::read_to_string(sparse.join("checkpoints/last/state.json")).unwrap(),
    )
    .unwrap();
    // Checkpoints after steps 2 (stage end), 3 (a multiple of 3) and 4 (stage end), not 5.
    assert_eq!(state["rl_steps"], 4);
    assert_eq!(records(&sparse.join("metrics.jsonl")).len(), 5);
    let saved = TrainConfig::from_json_file(&sparse.join("config.json")).unwrap();
    assert_eq!(saved.checkpoint_every, 3);
    train(&["train", "--resume", sparse_s]);
    for file in ["metrics.jsonl", "eval.jsonl", "samples.jsonl"] {
        let (a, b) = (records(&whole.join(file)), records(&sparse.join(file)));
        assert!(!a.is_empty(), "{file}");
        assert_eq!(a, b, "{file}");
    }
}

/// A run whose `config.json` predates `rl.roc` as an object (`"roc": false`) starts and
/// resumes: plain GRPO, G rollouts per prompt.
#[test]
fn an_old_config_with_roc_false_runs_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let path = super::train_common::small_smoke_config(dir.path());
    let old = |path: &Path| {
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        v["rl"]["roc"] = Value::Bool(false);
        std::fs::write(path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    };
    old(&path);
    let run = dir.path().join("run");
    let (config, run_s) = (path.to_str().unwrap(), run.to_str().unwrap());
    let out = train(&[
        "train",
        "--config",
        config,
        "--out",
        run_s,
        "--stop-after-rl-steps",
        "1",
    ]);
    assert!(out.contains("stopped early"), "{out}");
    let saved: TrainConfig =
        serde_json::from_str(&std::fs::read_to_string(run.join("config.json")).unwrap()).unwrap();
    assert_eq!(saved.rl.roc, rstar_agent::train::RocOptions::off());
    // The run directory as an older trainer wrote it.
    old(&run.join("config.json"));
    let out = train(&["train", "--resume", run_s]);
    assert!(out.contains("after 8 SFT steps and 1 RL steps"), "{out}");
    let metrics = records(&run.join("metrics.jsonl"));
    assert_eq!(metrics.len(), 6);
    for m in &metrics {
        // smoke: G = 2 and no RoC: G rollouts per prompt (2 prompts, fewer in a small hard pool).
        assert_eq!(m["roc"], Value::Bool(false), "{m}");
        assert_eq!(
            m["rollouts"].as_u64(),
            m["prompts"].as_u64().map(|p| 2 * p),
            "{m}"
        );
    }
}
