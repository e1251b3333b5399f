//! `rstar train --verify remote` (issue 46): answers scored on the tool servers' `/verify`
//! give the run the in-process verifier gives it, step for step, with either driver; and
//! `remote` without tool servers is refused naming the field.

use std::path::Path;

use rstar_curriculum::Stage;
use rstar_policy::{Tokenizer, WeightDtype, save_dir};
use serde_json::Value;
use std::sync::atomic::Ordering;

use super::common::{DyingProxy, tool_server};
use super::train::rstar;
use super::train_common::{jsonl, overfit, prompts, small_smoke_config, tasks};
use super::train_scheduled::config_file;

/// Starts `config` from a policy overfit on the problems it trains and is evaluated on
/// (`data`), so its rollouts call the tools and some answers are right.
fn from_a_trained_policy(dir: &Path, config: &Path) {
    let ts = tasks(6, 8);
    let start = dir.join("start");
    save_dir(
        &overfit(&ts, 100),
        &Tokenizer::char(),
        &start,
        WeightDtype::F32,
    )
    .unwrap();
    let data = dir.join("problems.jsonl");
    let lines: Vec<String> = prompts(&ts)
        .iter()
        .map(|p| serde_json::to_string(p).unwrap())
        .collect();
    std::fs::write(&data, lines.join("\n") + "\n").unwrap();
    let mut value: Value = serde_json::from_str(&std::fs::read_to_string(config).unwrap()).unwrap();
    value["init"] = start.to_str().unwrap().into();
    value["data"] = data.to_str().unwrap().into();
    value["eval"]["problems"] = 2.into();
    std::fs::write(config, value.to_string()).unwrap();
}

/// What must not depend on where answers are scored: each step's rewards, accuracies and
/// selection, the update they led to, and the curriculum's decision (timings left out).
fn scores(metrics: &[Value]) -> Vec<Value> {
    let keys = [
        "step",
        "rollouts",
        "all",
        "kept",
        "equal_reward_groups",
        "roc_metrics",
        "pg_loss",
        "grad_norm",
        "decision",
    ];
    metrics
        .iter()
        .map(|m| Value::Object(keys.iter().map(|k| (k.to_string(), m[k].clone())).collect()))
        .collect()
}

/// Trains with `config` twice on the same tool servers, verifying locally and remotely (through
/// a proxy that counts the `/verify` requests), and checks the runs agree.
fn local_and_remote_agree(dir: &Path, config: &str, extra: &[&str]) {
    let servers = [tool_server(), tool_server()];
    // Proxies that count the `/verify` requests and never die.
    let proxies = servers
        .each_ref()
        .map(|s| DyingProxy::start(&s.addr, "POST /verify", usize::MAX));
    let verified = || {
        proxies
            .iter()
            .map(|p| p.seen.load(Ordering::SeqCst))
            .sum::<usize>()
    };
    let urls = format!("http://{},http://{}", proxies[0].addr, proxies[1].addr);
    let train = |name: &str, verify: &str| {
        let out = dir.join(name);
        let mut args = vec![
            "train",
            "--config",
            config,
            "--out",
            out.to_str().unwrap(),
            "--seed",
            "5",
            "--tools",
            &urls,
            "--verify",
            verify,
        ];
        args.extend_from_slice(extra);
        // The remote run has a budget no call can meet (1 µs): every step is reported (#46).
        if verify == "remote" {
            args.extend_from_slice(&["--tool-latency-budget", "0.000001"]);
        }
        let (ok, stdout, stderr) = rstar(&args);
        assert!(ok, "{name}: {stdout}{stderr}");
        (out, format!("{stdout}{stderr}"))
    };
    let (local, local_log) = train("local", "local");
    assert_eq!(verified(), 0, "local verified remotely");
    assert!(!local_log.contains("answers: verified on"), "{local_log}");
    let (remote, remote_log) = train("remote", "remote");
    assert!(
        remote_log.contains(&format!("answers: verified on {}", urls.replace(',', ", "))),
        "{remote_log}"
    );
    assert!(verified() > 0, "no /verify request reached the servers");
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(remote.join("config.json")).unwrap())
            .unwrap();
    assert_eq!(saved["rl"]["verify"], "remote");

    let (l, r): (Vec<Value>, Vec<Value>) = (
        jsonl(&local.join("metrics.jsonl")),
        jsonl(&remote.join("metrics.jsonl")),
    );
    assert!(!l.is_empty());
    assert_eq!(scores(&l), scores(&r));
    // Every step times its tool calls; only the remote run had a budget, and every call
    // of it was over.
    for (m, budget) in l
        .iter()
        .map(|m| (m, None))
        .chain(r.iter().map(|m| (m, Some(1e-6))))
    {
        let t = &m["tool_latency"];
        let calls = t["calls"].as_u64().expect("tool_latency.calls");
        assert!(calls > 0, "{m}");
        assert!(
            t["p50_ms"].as_f64().unwrap() <= t["max_ms"].as_f64().unwrap(),
            "{m}"
        );
        assert_eq!(t["budget_secs"].as_f64(), budget, "{m}");
        let over = if budget.is_some() { calls } else { 0 };
        assert_eq!(t["over_budget"].as_u64(), Some(over), "{m}");
    }
    assert!(!local_log.contains("took longer than"), "{local_log}");
    assert!(
        remote_log.contains("warning: step 1: ")
            && remote_log.contains("tool calls took longer than the 0.000001 s budget"),
        "{remote_log}"
    );
    assert!(
        remote_log.contains("steps over the 0.000001 s budget: 1"),
        "{remote_log}"
    );
    assert!(
        local_log.contains("tool calls: ") && local_log.contains("(worst step)"),
        "{local_log}"
    );
    let accuracy: f64 = l
        .iter()
        .map(|m| m["all"]["accuracy"].as_f64().unwrap())
        .sum();
    assert!(
        accuracy > 0.0,
        "no step had a right answer: the comparison proves little"
    );
    let (l, r) = (
        std::fs::read_to_string(local.join("eval.jsonl")).unwrap(),
        std::fs::read_to_string(remote.join("eval.jsonl")).unwrap(),
    );
    assert!(!l.is_empty());
    assert_eq!(l, r, "eval.jsonl");
    let (l, r) = (
        untimed(jsonl(&local.join("samples.jsonl"))),
        untimed(jsonl(&remote.join("samples.jsonl"))),
    );
    assert!(!l.is_empty());
    assert_eq!(l, r, "samples.jsonl");
}

/// Trajectories without the tool calls' measured `execution time: …s` lines (which the
/// compact template's tool turns leave out, so the rollouts do not see them).
fn untimed(mut samples: Vec<Value>) -> Vec<Value> {
    for s in &mut samples {
        for call in s["tool_calls"].as_array_mut().into_iter().flatten() {
            if let Some(text) = call["outcome"]["text"].as_str() {
                let kept: Vec<&str> = text
                    .lines()
                    .filter(|l| !l.starts_with("execution time:"))
                    .collect();
                call["outcome"]["text"] = kept.join("\n").into();
            }
        }
    }
    samples
}

#[test]
fn issue_46_remote_verification_scores_the_smoke_run_as_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_smoke_config(dir.path());
    from_a_trained_policy(dir.path(), &config);
    local_and_remote_agree(dir.path(), config.to_str().unwrap(), &[]);
}

#[test]
fn issue_46_remote_verification_scores_scheduled_rollouts_as_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path(), vec![Stage::new("long", 128, 3).steps(3)], 2);
    from_a_trained_policy(dir.path(), Path::new(&config));
    local_and_remote_agree(
        dir.path(),
        &config,
        &["--rollout", "scheduled", "--engines", "1"],
    );
}

#[test]
fn remote_verification_without_tool_servers_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_smoke_config(dir.path());
    let (ok, _, stderr) = rstar(&[
        "train",
        "--config",
        config.to_str().unwrap(),
        "--out",
        dir.path().join("run").to_str().unwrap(),
        "--verify",
        "remote",
    ]);
    assert!(!ok);
    assert!(
        stderr.contains("`rl.verify`") && stderr.contains("tools.servers"),
        "{stderr}"
    );
    let (ok, _, stderr) = rstar(&["train", "--verify", "nearby", "--dry-run"]);
    assert!(!ok);
    assert!(stderr.contains("expected `local` or `remote`"), "{stderr}");
    // `local` is the default and stays out of the saved config.
    let (ok, stdout, stderr) = rstar(&["train", "--preset", "smoke", "--dry-run"]);
    assert!(ok, "{stderr}");
    let printed: Value = serde_json::from_str(&stdout).unwrap();
    assert!(printed["rl"].get("verify").is_none(), "{stdout}");
}
