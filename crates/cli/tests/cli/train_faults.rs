//! `rstar train` on remote engines and tool servers that die mid-run (#20's faults): the
//! rollouts of a lost engine go on on the others from their last completed turn, the calls
//! of a lost tool server are retried on the others, and a run with no engine left stops with
//! an error that says how to go on.

use rstar_curriculum::Stage;
use rstar_policy::{Tokenizer, WeightDtype, save_dir};
use serde_json::Value;
use std::sync::atomic::Ordering;

use super::common::{DyingProxy, Listening, command, tool_server};
use super::train::rstar;
use super::train_common::{jsonl, overfit, tasks};
use super::train_scheduled::config_file;

/// A policy that writes the format (so that its rollouts call the tools) saved in `dir/start`,
/// a smoke config of one stage of `steps` RL steps that starts from it, and two `rstar serve`
/// engines serving it.
fn start_from_a_formatted_policy(dir: &std::path::Path, steps: u64) -> (String, [Listening; 2]) {
    let start = dir.join("start");
    let model = overfit(&tasks(3, 8), 60);
    save_dir(&model, &Tokenizer::char(), &start, WeightDtype::F32).unwrap();
    let config = config_file(dir, vec![Stage::new("short", 96, 2).steps(steps)], 2);
    let mut value: Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    value["init"] = start.to_str().unwrap().into();
    std::fs::write(&config, value.to_string()).unwrap();
    let engine = || {
        Listening::start(command().args([
            "serve",
            "--port",
            "0",
            "--model",
            start.to_str().unwrap(),
        ]))
    };
    (config, [engine(), engine()])
}

#[test]
fn a_lost_engine_and_a_lost_tool_server_lose_no_rollout() {
    let dir = tempfile::tempdir().unwrap();
    let (config, engines) = start_from_a_formatted_policy(dir.path(), 2);
    let tools = [tool_server(), tool_server()];
    // Engine 1 dies at its third turn of the first step; tool server 0 (the one the client
    // tries first) at its second batch.
    let engine_proxy = DyingProxy::start(&engines[1].addr, "POST /v1/completions", 3);
    let tool_proxy = DyingProxy::start(&tools[0].addr, "POST /run", 2);
    let engine_urls = [
        format!("http://{}", engines[0].addr),
        format!("http://{}", engine_proxy.addr),
    ];
    let tool_urls = [
        format!("http://{}", tool_proxy.addr),
        format!("http://{}", tools[1].addr),
    ];
    let out = dir.path().join("run");
    let (ok, stdout, stderr) = rstar(&[
        "train",
        "--config",
        &config,
        "--out",
        out.to_str().unwrap(),
        "--engines",
        &engine_urls.join(","),
        "--tools",
        &tool_urls.join(","),
    ]);
    let log = format!("{stdout}{stderr}");
    assert!(ok, "{log}");
    assert!(
        engine_proxy.dead.load(Ordering::SeqCst),
        "engine 1 never died"
    );
    assert!(
        tool_proxy.dead.load(Ordering::SeqCst),
        "tool server 0 never died: it saw {} batches",
        tool_proxy.seen.load(Ordering::SeqCst)
    );
    assert!(
        log.contains(&format!("tool calls: on {}", tool_urls.join(", "))),
        "{log}"
    );
    assert!(
        log.contains(&format!("warning: step 1: lost {}", engine_urls[1])),
        "{log}"
    );
    let metrics: Vec<Value> = jsonl(&out.join("metrics.jsonl"));
    assert_eq!(metrics.len(), 2);
    for (i, m) in metrics.iter().enumerate() {
        // Every rollout of every step was written and scored: smoke's 2 prompts × 2G.
        assert_eq!(m["rollouts"], 8, "{m}");
        assert_eq!(m["all"]["count"], 8, "{m}");
        assert_eq!(m["weight_version"], format!("step-{i}"), "{m}");
        assert!(
            m["rollout/logprob_diff_max"].as_f64().unwrap() < 1e-3,
            "{m}"
        );
        let d = &m["dispatch"];
        let turns: u64 = d["turns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .sum();
        assert!(turns >= 8, "{m}");
        assert_eq!(
            d["idle_secs"].as_array().unwrap().len(),
            d["engines"].as_array().unwrap().len()
        );
    }
    let first = &metrics[0]["dispatch"];
    assert_eq!(first["engines"], serde_json::json!(engine_urls));
    assert_eq!(first["lost"], serde_json::json!([engine_urls[1]]));
    assert_eq!(first["engines_lost"], 1);
    assert!(first["redispatched"].as_u64().unwrap() >= 1, "{first}");
    // Engine 1 died at its third request, taking the two in flight with it: it wrote at
    // most those two turns, and every other went to engine 0.
    assert!(first["turns"][1].as_u64().unwrap() <= 2, "{first}");
    // The lost engine is not asked again.
    assert_eq!(
        metrics[1]["dispatch"]["engines"],
        serde_json::json!([engine_urls[0]])
    );

    // With no engine left the run stops, saying how to go on.
    let (ok, _, stderr) = rstar(&[
        "train",
        "--config",
        &config,
        "--out",
        dir.path().join("none").to_str().unwrap(),
        "--engines",
        &engine_urls[1],
        "--engine-kind",
        "rstar",
        "--tools",
        &tool_urls[1],
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("every engine is gone") && stderr.contains("--resume"),
        "{stderr}"
    );
}

/// Issue #64: with `--max-staleness 1` the producer rolls out ahead on the remote engines; an
/// engine lost mid-step still loses no rollout and duplicates none, and every step trains on
/// rollouts at most one update old, written by the version the record names.
#[test]
fn asynchronous_rl_loses_no_rollout_when_an_engine_dies() {
    let dir = tempfile::tempdir().unwrap();
    let (config, engines) = start_from_a_formatted_policy(dir.path(), 3);
    let tools = tool_server();
    // Engine 1 dies at its fourth turn.
    let engine_proxy = DyingProxy::start(&engines[1].addr, "POST /v1/completions", 4);
    let engine_urls = [
        format!("http://{}", engines[0].addr),
        format!("http://{}", engine_proxy.addr),
    ];
    let out = dir.path().join("run");
    let (ok, stdout, stderr) = rstar(&[
        "train",
        "--config",
        &config,
        "--out",
        out.to_str().unwrap(),
        "--engines",
        &engine_urls.join(","),
        "--engine-kind",
        "rstar",
        "--tools",
        &format!("http://{}", tools.addr),
        "--max-staleness",
        "1",
    ]);
    let log = format!("{stdout}{stderr}");
    assert!(ok, "{log}");
    assert!(
        engine_proxy.dead.load(Ordering::SeqCst),
        "engine 1 never died"
    );
    let metrics: Vec<Value> = jsonl(&out.join("metrics.jsonl"));
    assert_eq!(metrics.len(), 3);
    let mut lost = 0;
    for m in &metrics {
        let step = m["step"].as_u64().unwrap();
        // Every rollout written and scored once: smoke's 2 prompts × 2G.
        assert_eq!(m["rollouts"], 8, "{m}");
        assert_eq!(m["all"]["count"], 8, "{m}");
        let a = &m["asynchronous"];
        assert_eq!(a["dropped_groups"], 0, "{m}");
        let version = a["version"].as_u64().unwrap();
        assert!(version < step && version + 2 >= step, "{m}");
        // The engines served the version the batch names, with the trainer's log-probs.
        assert_eq!(m["weight_version"], format!("step-{version}"), "{m}");
        assert!(
            m["rollout/logprob_diff_max"].as_f64().unwrap() < 1e-3,
            "{m}"
        );
        lost += m["dispatch"]["engines_lost"].as_u64().unwrap();
    }
    assert_eq!(lost, 1, "{metrics:?}");
}
