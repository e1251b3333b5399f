//! Issue 42: nothing fails silently. A diverging run stops at the step that diverged, with
//! nothing of it logged or checkpointed; a corrupted checkpoint is refused with its path, or
//! replaced by the sound one before it; an edited `config.json` or `state.json` is refused
//! on resume; configs that would panic or mislead are refused naming the field, with one
//! cause per message.

use std::path::Path;

use serde_json::Value;

use super::train::rstar;
use super::train_common::small_smoke_config;

/// The small smoke config with `edit` applied to its JSON, written to `dir/edited.json`.
fn edited(dir: &Path, edit: impl FnOnce(&mut Value)) -> String {
    let path = small_smoke_config(dir);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    let out = dir.join("edited.json");
    std::fs::write(&out, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    out.to_str().unwrap().to_string()
}

/// Overwrites the last 4096 bytes of a file with NaN (`0xFF` bytes).
fn poison(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let n = bytes.len();
    bytes[n - 4096..].fill(0xFF);
    std::fs::write(path, bytes).unwrap();
}

/// `rstar train` of `config` into `run`, stopped after RL step 2 as a kill would leave it
/// (checkpoints after steps 1 and 2: `last/` and `last.old/`).
fn stopped_after_two_rl_steps(config: &Path, run: &Path) {
    let (ok, _, stderr) = rstar(&[
        "train",
        "--config",
        config.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
        "--stop-after-rl-steps",
        "2",
    ]);
    assert!(ok, "{stderr}");
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

#[test]
fn issue_42_a_diverging_run_stops_at_the_step_and_logs_no_null() {
    let dir = tempfile::tempdir().unwrap();
    let config = edited(dir.path(), |v| v["sft"]["lr"] = 1e30.into());
    let run = dir.path().join("run");
    let run_s = run.to_str().unwrap();
    let (ok, _, stderr) = rstar(&["train", "--config", &config, "--out", run_s]);
    assert!(!ok, "a diverging run succeeded: {stderr}");
    assert!(
        stderr.contains("sft step") && stderr.contains("diverged") && stderr.contains("sft.lr"),
        "{stderr}"
    );
    let metrics = std::fs::read_to_string(run.join("sft_metrics.jsonl")).unwrap();
    assert!(!metrics.contains("null"), "{metrics}");
    // The diverged step is the one after the last line.
    let step: u64 = stderr
        .split("sft step ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no step in {stderr}"));
    assert_eq!(metrics.lines().count() as u64, step - 1, "{stderr}");
    assert!(!run.join("metrics.jsonl").exists() || lines(&run.join("metrics.jsonl")) == 0);
    // Every checkpoint written is finite and says SFT; a resume goes on from the last one and
    // diverges again, at the same step.
    let state = std::fs::read_to_string(run.join("checkpoints/last/state.json")).unwrap();
    assert!(state.contains("\"phase\": \"sft\""), "{state}");
    let (ok, _, again) = rstar(&["train", "--resume", run_s]);
    assert!(!ok);
    assert!(
        again.contains("resuming") && again.contains(&format!("sft step {step} diverged")),
        "{again}"
    );
}

#[test]
fn issue_42_a_corrupted_checkpoint_falls_back_on_the_previous_one_or_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_smoke_config(dir.path());
    let run = dir.path().join("run");
    let run_s = run.to_str().unwrap();
    stopped_after_two_rl_steps(&config, &run);
    let last = run.join("checkpoints/last");
    let old = run.join("checkpoints/last.old");
    // Every file of a checkpoint is listed in its digests, in sha256sum's format.
    let sums = std::fs::read_to_string(last.join("checksums.sha256")).unwrap();
    for file in [
        "model.safetensors",
        "optimizer.bpk",
        "state.json",
        "config.json",
    ] {
        assert!(sums.contains(&format!("  {file}\n")), "{file}: {sums}");
    }
    assert!(
        old.join("state.json").is_file(),
        "the previous checkpoint is kept"
    );

    // NaNs written into the last checkpoint's weights: the resume names the file and goes on
    // from the previous checkpoint (after RL step 1), to the end.
    poison(&last.join("model.safetensors"));
    let (ok, _, stderr) = rstar(&["train", "--resume", run_s]);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("unsound")
            && stderr.contains("model.safetensors")
            && stderr.contains("has changed since it was saved")
            && stderr.contains("after 8 SFT steps and 1 RL steps"),
        "{stderr}"
    );
    assert!(run.join("checkpoints/last.unsound").is_dir());
    assert_eq!(lines(&run.join("metrics.jsonl")), 6);

    // Both checkpoints corrupted: refused, naming the file.
    let run2 = dir.path().join("run2");
    let run2_s = run2.to_str().unwrap();
    stopped_after_two_rl_steps(&config, &run2);
    for d in ["last", "last.old"] {
        poison(&run2.join("checkpoints").join(d).join("model.safetensors"));
    }
    let (ok, _, stderr) = rstar(&["train", "--resume", run2_s]);
    assert!(!ok);
    assert!(
        stderr.contains("checkpoints/last/model.safetensors") && stderr.contains("has changed"),
        "{stderr}"
    );
    // Without the digests, the weights' own check refuses the NaNs.
    let (ok, _, stderr) = rstar(&["train", "--resume", run2_s, "--no-verify"]);
    assert!(!ok);
    assert!(
        stderr.contains("model.safetensors") && stderr.contains("non-finite"),
        "{stderr}"
    );
}

#[test]
fn issue_42_a_resume_refuses_an_edited_config_or_state() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_smoke_config(dir.path());
    let run = dir.path().join("run");
    let run_s = run.to_str().unwrap();
    stopped_after_two_rl_steps(&config, &run);

    // state.json says 999 RL steps: its digest no longer matches, and without the digests
    // its counts contradict the metrics files. Either way the previous checkpoint is used.
    let state_path = run.join("checkpoints/last/state.json");
    let text = std::fs::read_to_string(&state_path).unwrap();
    std::fs::write(
        &state_path,
        text.replace("\"rl_steps\": 2", "\"rl_steps\": 999"),
    )
    .unwrap();
    let (ok, _, stderr) = rstar(&[
        "train",
        "--resume",
        run_s,
        "--no-verify",
        "--stop-after-rl-steps",
        "3",
    ]);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("`rl_steps` is 999") && stderr.contains("after 8 SFT steps and 1 RL steps"),
        "{stderr}"
    );
    assert_eq!(lines(&run.join("metrics.jsonl")), 3);

    // An edited config.json is refused, naming the field, unless told; then recorded.
    let config_path = run.join("config.json");
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    v["rl"]["lr"] = 0.5.into();
    std::fs::write(&config_path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
    let (ok, _, stderr) = rstar(&["train", "--resume", run_s]);
    assert!(!ok);
    assert!(
        stderr.contains("config.json")
            && stderr.contains("`rl.lr`")
            && stderr.contains("--resume-with-edited-config"),
        "{stderr}"
    );
    let (ok, _, stderr) = rstar(&["train", "--resume", run_s, "--resume-with-edited-config"]);
    assert!(ok, "{stderr}");
    assert!(stderr.contains("edited config.json"), "{stderr}");
    let edits = std::fs::read_to_string(run.join("config_edits.jsonl")).unwrap();
    assert_eq!(edits.lines().count(), 1, "{edits}");
    assert!(edits.contains("rl.lr") && edits.contains("0.5"), "{edits}");
    assert_eq!(lines(&run.join("metrics.jsonl")), 6);
}

/// A change to a config's JSON.
type Edit = fn(&mut Value);

#[test]
fn issue_42_configs_that_would_panic_or_mislead_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&str, Edit, &str)] = &[
        (
            "model.vocab_size",
            |v| v["model"]["vocab_size"] = 10.into(),
            "built-in tokenizer",
        ),
        (
            "model.num_hidden_layers",
            |v| v["model"]["num_hidden_layers"] = 0.into(),
            "must be positive",
        ),
        (
            "model.eos_token_ids",
            |v| v["model"]["eos_token_ids"] = serde_json::json!([99999]),
            "outside the vocabulary",
        ),
        (
            "rl.pool_size",
            |v| v["rl"]["pool_size"] = 1.into(),
            "rl.prompts_per_step",
        ),
        (
            "eval.problems",
            |v| v["eval"]["problems"] = 0.into(),
            "at least 1",
        ),
    ];
    for (field, edit, needle) in cases {
        let config = edited(dir.path(), edit);
        let out = dir.path().join("never");
        let (ok, _, stderr) =
            rstar(&["train", "--config", &config, "--out", out.to_str().unwrap()]);
        assert!(!ok, "{field}: accepted");
        assert!(
            stderr.contains(&format!("`{field}`")) && stderr.contains(needle),
            "{field}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{field}: {stderr}");
    }
    // One cause per message: the reason appears once.
    let config = edited(dir.path(), |v| v["rl"]["grpo"]["clip_ratio_low"] = 5.into());
    let out = dir.path().join("never");
    let (ok, _, stderr) = rstar(&["train", "--config", &config, "--out", out.to_str().unwrap()]);
    assert!(!ok);
    assert!(stderr.contains("clip_ratio_low"), "{stderr}");
    assert_eq!(stderr.matches("got 5").count(), 1, "{stderr}");
}
