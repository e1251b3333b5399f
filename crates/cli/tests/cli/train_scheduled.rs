//! RL steps through the scheduled driver (`rl.rollout_driver: "scheduled"`, `rstar train
//! --rollout scheduled`) and `rstar train --record-entropy`: per-turn seeds make the rollouts of
//! a step independent of the engine count, a smoke run writes the usual artefacts with sane
//! metrics, and the sample trajectories keep per-token statistics only when asked.

use std::path::Path;
use std::sync::Arc;

use burn::optim::ModuleOptimizer;
use burn::tensor::Device;
use rstar_agent::episode::Trajectory;
use rstar_agent::scheduled::{AsyncTools, PoolTools};
use rstar_agent::train::rl::{self, StepInputs, StepRecord};
use rstar_agent::train::{Engines, RolloutDriver, TrainConfig, optim::adamw};
use rstar_curriculum::{CurriculumConfig, Stage};
use rstar_policy::{Qwen, Tokenizer, WeightDtype, save_dir};
use rstar_scheduler::DispatchPolicy;
use serde_json::Value;

use super::common::{Listening, command};
use super::train::rstar;
use super::train_common::{jsonl, overfit_trainable, pool, prompts, tasks, tiny_config, tools};

fn scheduled_step(
    model: Qwen,
    engines: usize,
    dispatch: DispatchPolicy,
) -> (StepRecord, Vec<Trajectory>) {
    let ts = tasks(3, 8);
    let mut options = TrainConfig::smoke().rl;
    options.group_size = 2;
    options.prompts_per_step = 3;
    options.rollout_driver = RolloutDriver::Scheduled;
    options.engines = Engines::Local(engines);
    options.dispatch = dispatch;
    let stage = Stage::new("s", 120, 3).steps(1);
    let pool_now = prompts(&ts);
    let mut optimizer: ModuleOptimizer = adamw(0.0);
    let inputs = StepInputs {
        step: 1,
        stage: &stage,
        stage_index: 0,
        pool: &pool_now,
        options: &options,
        seed: 11,
        template: rstar_agent::template::TemplateFormat::Compact,
        tool_latency_budget_secs: None,
        policy_version: None,
    };
    let async_tools: Arc<dyn AsyncTools> = Arc::new(PoolTools::new(pool().pool().clone()));
    let (_, record, trajectories) = rl::step(
        model,
        &mut optimizer,
        &Tokenizer::char(),
        &inputs,
        rl::StepTools::new(&tools()).scheduled(async_tools),
    )
    .unwrap();
    (record, trajectories)
}

#[test]
fn a_scheduled_step_samples_the_same_tokens_with_one_or_two_engines() {
    let model = overfit_trainable(&tasks(3, 8), 100);
    let (one, a) = scheduled_step(model.clone(), 1, DispatchPolicy::KvAware);
    let (two, b) = scheduled_step(model, 2, DispatchPolicy::LeastRequests);
    // 3 prompts × 2G = 12 rollouts, prompt-major, samples 0..4 of each prompt.
    assert_eq!(one.rollouts, 12);
    assert_eq!(a.len(), 12);
    assert_eq!(one.all.count, 12);
    for (i, t) in a.iter().enumerate() {
        assert_eq!(t.sample as usize, i % 4, "{}", t.id);
        assert_eq!(t.id, a[i - i % 4].id);
        assert!(t.response_ids.len() <= 120);
        assert_eq!(t.loss_mask.len(), t.response_ids.len());
        let r = t.reward.expect("scored");
        assert!(r == 0.0 || r == 1.0, "reward {r}");
        // The scheduled driver keeps no per-token statistics for training.
        assert!(t.entropies.is_empty() && t.token_texts.is_empty());
    }
    // The policy writes the format: the rollouts go through the sandbox.
    assert!(a.iter().any(|t| !t.tool_calls.is_empty()));
    // The same per-turn seeds: the same tokens, whichever engine wrote a turn.
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!((&x.id, x.sample), (&y.id, y.sample));
        assert_eq!(x.prompt_ids, y.prompt_ids);
        assert_eq!(
            x.response_ids, y.response_ids,
            "`{}` sample {}",
            x.id, x.sample
        );
        assert_eq!(x.reward, y.reward);
    }
    assert_eq!(one.all, two.all);
    assert_eq!(one.kept.count, two.kept.count);
    // RoC keeps G of 2G in every group that survives equal-reward rejection.
    assert_eq!(one.kept.count, (3 - one.equal_reward_groups) * 2, "{one:?}");
    assert!((0.0..=1.0).contains(&one.all.accuracy));
    assert!(one.time_rollout > 0.0 && one.time_tools >= 0.0);
}

/// The smoke preset shrunk for debug builds, `stages` and `problems` held-out problems.
pub(super) fn config_file(dir: &Path, stages: Vec<Stage>, problems: usize) -> String {
    let mut config = TrainConfig::smoke();
    config.model = tiny_config();
    config.sft.steps = 6;
    config.sft.corpus_size = 8;
    config.tools.workers = 2;
    config.eval.problems = problems;
    config.curriculum = CurriculumConfig { stages };
    let path = dir.join("config.json");
    std::fs::write(&path, serde_json::to_string(&config).unwrap()).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn a_smoke_run_with_scheduled_rollouts_writes_the_usual_files_without_entropies() {
    let dir = tempfile::tempdir().unwrap();
    let stages = vec![
        Stage::new("short", 96, 2).steps(1),
        Stage::new("hard", 128, 3).steps(1).hard(2, 1.0),
    ];
    let config = config_file(dir.path(), stages, 3);
    let out = dir.path().join("run");
    let (ok, stdout, stderr) = rstar(&[
        "train",
        "--config",
        &config,
        "--out",
        out.to_str().unwrap(),
        "--rollout",
        "scheduled",
        "--engines",
        "2",
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("| stage short |") && stdout.contains("| stage hard |"));
    let saved: TrainConfig =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(saved.rl.rollout_driver, RolloutDriver::Scheduled);
    assert_eq!(saved.rl.engines, Engines::Local(2));
    assert!(!saved.record_entropy);
    let metrics: Vec<Value> = jsonl(&out.join("metrics.jsonl"));
    assert_eq!(metrics.len(), 2);
    for m in &metrics {
        // smoke: 2 prompts × 2G (G = 2).
        assert_eq!(m["rollouts"], 8);
        assert_eq!(m["all"]["count"], 8);
        let kept = m["kept"]["count"].as_u64().unwrap();
        let dropped = m["equal_reward_groups"].as_u64().unwrap();
        assert_eq!(kept, (2 - dropped) * 2, "{m}");
        for key in ["accuracy", "tool_error_rate", "truncation_rate"] {
            let v = m["all"][key].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&v), "{key} {v} in {m}");
        }
        assert!(m["time_rollout"].as_f64().unwrap() > 0.0);
        assert_eq!(m["updates"].as_u64().unwrap() > 0, kept > 0, "{m}");
    }
    assert_eq!(jsonl::<Value>(&out.join("eval.jsonl")).len(), 3);
    let samples: Vec<Value> = jsonl(&out.join("samples.jsonl"));
    assert_eq!(samples.len(), 3);
    for s in &samples {
        let r = s["reward"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&r));
        for key in ["entropies", "token_logprobs", "token_texts"] {
            assert!(s.get(key).is_none(), "{key} kept without --record-entropy");
        }
    }
    for file in ["sft_corpus.jsonl", "sft_metrics.jsonl", "plots"] {
        assert!(out.join(file).exists(), "{file}");
    }
    assert!(out.join("checkpoints/stage-hard/config.json").exists());
}

#[test]
fn record_entropy_keeps_statistics_that_analyze_entropy_reads() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), vec![Stage::new("short", 96, 2).steps(1)], 2);
    let out = dir.path().join("run");
    let (ok, _, stderr) = rstar(&[
        "train",
        "--config",
        &config,
        "--out",
        out.to_str().unwrap(),
        "--record-entropy",
    ]);
    assert!(ok, "{stderr}");
    let samples_path = out.join("samples.jsonl");
    let trajectories =
        Trajectory::read_jsonl(&samples_path).expect("samples.jsonl reads as trajectories");
    assert_eq!(trajectories.len(), 2);
    for t in &trajectories {
        let n = t.assistant_token_count();
        assert!(n > 0);
        assert_eq!(t.entropies.len(), n);
        assert_eq!(t.token_logprobs.len(), n);
        assert_eq!(t.token_texts.len(), n);
        assert!(t.entropies.iter().all(|e| e.is_finite() && *e >= 0.0));
        assert!(t.token_logprobs.iter().all(|l| l.is_finite() && *l <= 0.0));
    }
    let (ok, stdout, stderr) = rstar(&[
        "analyze",
        "entropy",
        samples_path.to_str().unwrap(),
        "--json",
    ]);
    assert!(ok, "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    let tokens: usize = trajectories.iter().map(|t| t.entropies.len()).sum();
    assert_eq!(report["trajectories"], 2, "{stdout}");
    assert_eq!(report["without_entropies"], 0, "{stdout}");
    assert_eq!(report["tokens"], tokens, "{stdout}");
}

#[test]
fn resume_refuses_the_new_config_flags() {
    for flags in [
        &["--rollout", "scheduled"][..],
        &["--engines", "2"],
        &["--record-entropy"],
        &["--rollout-correction", "token"],
    ] {
        let mut args = vec!["train", "--resume", "/nonexistent/run"];
        args.extend_from_slice(flags);
        let (ok, _, stderr) = rstar(&args);
        assert!(!ok);
        assert!(
            stderr.contains(flags[0]) && stderr.contains("would change it"),
            "{stderr}"
        );
    }
    let (ok, _, stderr) = rstar(&["train", "--rollout", "async", "--out", "/nonexistent/x"]);
    assert!(!ok);
    assert!(
        stderr.contains("`async`") && stderr.contains("scheduled"),
        "{stderr}"
    );
}

#[test]
fn configs_without_the_new_fields_still_read_and_a_bad_driver_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut value = serde_json::to_value(TrainConfig::smoke()).unwrap();
    for key in ["rollout_driver", "engines", "dispatch"] {
        value["rl"].as_object_mut().unwrap().remove(key).unwrap();
    }
    value
        .as_object_mut()
        .unwrap()
        .remove("record_entropy")
        .unwrap();
    let path = dir.path().join("old.json");
    std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
    let old = TrainConfig::from_json_file(&path).unwrap();
    assert_eq!(old.rl.rollout_driver, RolloutDriver::Lockstep);
    assert_eq!(old.rl.engines, Engines::Local(1));
    assert_eq!(old.rl.dispatch, DispatchPolicy::KvAware);
    assert!(!old.record_entropy);
    assert_eq!(old, TrainConfig::smoke());

    value["rl"]["rollout_driver"] = "async".into();
    std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
    let err = TrainConfig::from_json_file(&path).unwrap_err().to_string();
    assert!(err.contains("old.json") && err.contains("`async`"), "{err}");
    let line = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .position(|l| l.contains("\"async\""))
        .unwrap()
        + 1;
    assert!(err.contains(&format!("old.json:{line}:")), "{err}");

    value["rl"]["rollout_driver"] = "scheduled".into();
    value["rl"]["engines"] = 0.into();
    std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
    let err = TrainConfig::from_json_file(&path).unwrap_err().to_string();
    assert!(err.contains("`rl.engines`"), "{err}");
}

#[test]
fn remote_engines_write_each_step_with_the_weights_published_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let stages = vec![
        Stage::new("short", 96, 2).steps(2),
        Stage::new("long", 128, 3).steps(1),
    ];
    let config = config_file(dir.path(), stages, 2);
    // The servers start from any weights of the run's architecture: the trainer publishes
    // its own before the first step.
    let start = dir.path().join("start");
    let model = Qwen::random(tiny_config(), 0, &Device::flex()).unwrap();
    save_dir(&model, &Tokenizer::char(), &start, WeightDtype::F32).unwrap();
    // Keyed, as servers other machines reach should be: the trainer sends
    // `$RSTAR_ENGINE_API_KEY` to each.
    let serve = || {
        Listening::start(command().env("RSTAR_API_KEY", "k3y").args([
            "serve",
            "--port",
            "0",
            "--model",
            start.to_str().unwrap(),
        ]))
    };
    let servers = [serve(), serve()];
    let urls: Vec<String> = servers
        .iter()
        .map(|s| format!("http://{}", s.addr))
        .collect();
    let out = dir.path().join("run");
    let with_key = |key: &str, args: &[&str]| {
        let run = command()
            .env("RSTAR_PYTHON", rstar_testdata::python())
            .env("RSTAR_ENGINE_API_KEY", key)
            .args(args)
            .output()
            .expect("the rstar binary runs");
        (
            run.status.success(),
            String::from_utf8(run.stdout).unwrap(),
            String::from_utf8(run.stderr).unwrap(),
        )
    };
    let rstar = |args: &[&str]| with_key("k3y", args);
    let engines = urls.join(",");
    let no_key = dir.path().join("no-key");
    let first = [
        "train",
        "--config",
        &config,
        "--out",
        no_key.to_str().unwrap(),
        "--engines",
        &engines,
    ];
    // Without the key the servers refuse the trainer before anything runs.
    let (ok, _, stderr) = with_key("", &first);
    assert!(!ok && stderr.contains("401"), "{stderr}");
    let (ok, stdout, stderr) = rstar(&[
        "train",
        "--config",
        &config,
        "--out",
        out.to_str().unwrap(),
        "--engines",
        &engines,
    ]);
    assert!(ok, "{stderr}");
    let log = format!("{stdout}{stderr}");
    assert!(
        log.contains(&format!("{} (rstar), {} (rstar)", urls[0], urls[1])),
        "{log}"
    );
    // URLs imply the scheduled driver, and the config records them.
    let saved: TrainConfig =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(saved.rl.rollout_driver, RolloutDriver::Scheduled);
    assert_eq!(saved.rl.engines, Engines::Remote(urls.clone()));
    // Step N's rollouts were written by the policy after N − 1 updates, and the engines'
    // log-probs are the trainer's to float rounding.
    let metrics: Vec<Value> = jsonl(&out.join("metrics.jsonl"));
    assert_eq!(metrics.len(), 3);
    for (i, m) in metrics.iter().enumerate() {
        assert_eq!(m["weight_version"], format!("step-{i}"), "{m}");
        let max = m["rollout/logprob_diff_max"].as_f64().unwrap();
        let mean = m["rollout/logprob_diff_mean"].as_f64().unwrap();
        assert!(max < 1e-3 && mean <= max, "{m}");
        eprintln!("step {}: logprob_diff_max {max:.3e} mean {mean:.3e}", i + 1);
        assert_eq!(m["rollouts"], 8, "{m}");
    }
    assert!(!log.contains("warning: step"), "{log}");
    // Both servers serve the last published weights; only their directory is left.
    for s in &servers {
        let (status, body) =
            rstar_testdata::http(&s.addr, "GET", "/get_weight_version", "", Some("k3y"));
        assert_eq!(
            (status, body.as_str()),
            (200, r#"{"weight_version":"step-2"}"#)
        );
    }
    let published: Vec<String> = std::fs::read_dir(out.join("published"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(published, ["step-2"]);

    // Published in bf16 (to the second server), the served weights are rounded: the
    // log-prob check shows it, and warns above the configured threshold.
    let mut bf16_config: Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    bf16_config["rl"]["logprob_diff_warn"] = serde_json::json!(1e-6);
    let bf16_config_path = dir.path().join("bf16.json");
    std::fs::write(&bf16_config_path, bf16_config.to_string()).unwrap();
    let bf16 = dir.path().join("bf16");
    let (ok, stdout, stderr) = rstar(&[
        "train",
        "--config",
        bf16_config_path.to_str().unwrap(),
        "--out",
        bf16.to_str().unwrap(),
        "--engines",
        &urls[1],
        "--publish-dtype",
        "bf16",
        "--stop-after-rl-steps",
        "1",
    ]);
    assert!(ok, "{stderr}");
    let first: Vec<Value> = jsonl(&bf16.join("metrics.jsonl"));
    let max = first[0]["rollout/logprob_diff_max"].as_f64().unwrap();
    eprintln!("bf16 published weights: logprob_diff_max {max:.3e}");
    assert!(max > 1e-5, "bf16 rounding left no trace: {}", first[0]);
    assert!(
        format!("{stdout}{stderr}").contains("warning: step 1: the engines' log-probs differ"),
        "{stdout}{stderr}"
    );

    // Pushed over HTTP (engines on machines without a shared path): the same check, and no
    // directory written.
    let pushed = dir.path().join("pushed");
    let (ok, _, stderr) = rstar(&[
        "train",
        "--config",
        &config,
        "--out",
        pushed.to_str().unwrap(),
        "--engines",
        &urls[1],
        "--publish-via",
        "http",
        "--stop-after-rl-steps",
        "1",
    ]);
    assert!(ok, "{stderr}");
    let first: Vec<Value> = jsonl(&pushed.join("metrics.jsonl"));
    assert_eq!(first[0]["weight_version"], "step-0");
    assert!(first[0]["rollout/logprob_diff_max"].as_f64().unwrap() < 1e-3);
    assert!(!pushed.join("published").exists());
    let saved: TrainConfig =
        serde_json::from_str(&std::fs::read_to_string(pushed.join("config.json")).unwrap())
            .unwrap();
    assert_eq!(saved.rl.publish_via, rstar_agent::train::PublishVia::Http);
    // Only `rstar serve` takes pushed weights.
    let (ok, _, stderr) = rstar(&[
        "train",
        "--config",
        &config,
        "--out",
        dir.path().join("refused").to_str().unwrap(),
        "--engines",
        &urls[1],
        "--engine-kind",
        "vllm",
        "--publish-via",
        "http",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("rl.publish_via") && stderr.contains("is vllm"),
        "{stderr}"
    );

    // A server whose turns report another version than the published one fails the step
    // instead of being trained on: told it is vLLM, the trainer reloads it without a version
    // (vLLM's call), so it keeps reporting `step-2` (the bf16 run used the other server).
    let stale = dir.path().join("stale");
    let (ok, _, stderr) = rstar(&[
        "train",
        "--config",
        &config,
        "--out",
        stale.to_str().unwrap(),
        "--engines",
        &urls[0],
        "--engine-kind",
        "vllm",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("weight version `step-2`") && stderr.contains("published `step-0`"),
        "{stderr}"
    );
    assert!(
        !stale.join("metrics.jsonl").exists()
            || jsonl::<Value>(&stale.join("metrics.jsonl")).is_empty()
    );
}

#[test]
fn bad_engine_lists_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), vec![Stage::new("s", 96, 2).steps(1)], 1);
    let out = dir.path().join("run");
    // `rstar train` on the config with `extra` flags must fail: its standard error.
    let refused = |extra: &[&str]| -> String {
        let mut args = vec!["train", "--config", &config, "--out", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        let (ok, _, stderr) = rstar(&args);
        assert!(!ok, "{extra:?} ran");
        stderr
    };
    let stderr = refused(&["--engines", "ftp://x"]);
    assert!(
        stderr.contains("comma-separated list of http:// URLs"),
        "{stderr}"
    );
    // Servers with the lock-step driver asked for explicitly.
    let stderr = refused(&["--engines", "http://127.0.0.1:9", "--rollout", "lockstep"]);
    assert!(
        stderr.contains("rl.rollout_driver") && stderr.contains("scheduled"),
        "{stderr}"
    );
    // Nobody listening.
    let stderr = refused(&["--engines", "http://127.0.0.1:9"]);
    assert!(stderr.contains("http://127.0.0.1:9"), "{stderr}");
}

/// `rstar train --lora` on remote engines publishes the adapter alone (issue #60): each step's
/// adapter is loaded under its version, every turn comes back from it, the engines' log-probs
/// are the trainer's LoRA forward's, each publication is the adapter's bytes, and only the
/// newest adapter stays loaded. Pushed over HTTP the same holds with nothing written, and a
/// second run over engines that still hold its names replaces them.
#[test]
fn a_lora_run_publishes_its_adapter_to_the_engines() {
    let dir = tempfile::tempdir().unwrap();
    // The resume test's smoke run: an `init` that earns mixed rewards, so RL moves the adapter.
    let config = super::resume::config_file(dir.path());
    let init = dir.path().join("init");
    let serve = || {
        Listening::start(command().args([
            "serve",
            "--port",
            "0",
            "--model",
            init.to_str().unwrap(),
        ]))
    };
    let servers = [serve(), serve()];
    let urls: Vec<String> = servers
        .iter()
        .map(|s| format!("http://{}", s.addr))
        .collect();
    let train = |out: &Path, engines: &str, extra: &[&str]| {
        let mut args = vec![
            "train",
            "--config",
            &config,
            "--out",
            out.to_str().unwrap(),
            "--engines",
            engines,
            "--sft-steps",
            "0",
            "--lora",
            "4",
            "--seed",
            "5",
        ];
        args.extend_from_slice(extra);
        let (ok, _, stderr) = rstar(&args);
        assert!(ok, "{stderr}");
        jsonl::<Value>(&out.join("metrics.jsonl"))
    };
    let model_bytes = std::fs::metadata(init.join("model.safetensors"))
        .unwrap()
        .len();
    let listed = |addr: &str| -> Vec<String> {
        let (status, text) = rstar_testdata::http(addr, "GET", "/v1/models", "", None);
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        v["data"]
            .as_array()
            .unwrap()
            .iter()
            .skip(1)
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect()
    };

    let out = dir.path().join("run");
    let metrics = train(&out, &urls.join(","), &["--stop-after-rl-steps", "3"]);
    assert_eq!(metrics.len(), 3);
    for (i, m) in metrics.iter().enumerate() {
        assert_eq!(m["weight_version"], format!("step-{i}"), "{m}");
        let max = m["rollout/logprob_diff_max"].as_f64().unwrap();
        assert!(max < 1e-3, "{m}");
        let bytes = m["publish/bytes"].as_u64().unwrap();
        eprintln!(
            "step {}: logprob_diff_max {max:.3e}, published {bytes} bytes (the model: {model_bytes})",
            i + 1
        );
        assert!(bytes * 5 < model_bytes, "{m}");
        assert!(m["publish/secs"].as_f64().unwrap() >= 0.0, "{m}");
        assert_eq!(m["dispatch"]["turns"].as_array().unwrap().len(), 2, "{m}");
    }
    assert!(
        metrics.iter().any(|m| m["updates"].as_u64() > Some(0)),
        "no update moved the adapter"
    );
    // What was published is the adapter's files; only the newest is left, and loaded.
    let last = out.join("published").join("step-2");
    let mut files: Vec<String> = std::fs::read_dir(&last)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["adapter_config.json", "adapter_model.safetensors"]);
    let on_disk: u64 = files
        .iter()
        .map(|f| std::fs::metadata(last.join(f)).unwrap().len())
        .sum();
    assert_eq!(metrics[2]["publish/bytes"].as_u64(), Some(on_disk));
    let left: Vec<_> = std::fs::read_dir(out.join("published")).unwrap().collect();
    assert_eq!(left.len(), 1);
    for s in &servers {
        assert_eq!(listed(&s.addr), ["step-2"]);
    }

    // Pushed over HTTP to one engine: nothing written; the bytes are the one adapter file.
    // A second such run finds its `step-0` already loaded there and replaces it.
    for run in ["pushed", "pushed-again"] {
        let pushed = dir.path().join(run);
        let metrics = train(
            &pushed,
            &urls[1],
            &["--publish-via", "http", "--stop-after-rl-steps", "1"],
        );
        assert_eq!(metrics[0]["weight_version"], "step-0");
        assert!(metrics[0]["rollout/logprob_diff_max"].as_f64().unwrap() < 1e-3);
        let bytes = metrics[0]["publish/bytes"].as_u64().unwrap();
        assert!(bytes > 0 && bytes * 5 < model_bytes, "{}", metrics[0]);
        assert!(!pushed.join("published").exists());
    }
    assert_eq!(listed(&servers[1].addr), ["step-0", "step-2"]);
}
